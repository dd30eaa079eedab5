"""Workflows of the workflow-language tests (tests/test_workflow_language.py).

Steps write :class:`~tests.flowapp.models.Ledger` rows (committed at once,
seen by every process), so a test counts how often each step's code ran,
in any worker process, and in which order.
"""

import asyncio
import os
import time
import uuid

from django_openworkflow import NonRetryableError, RetryPolicy, workflow
from tests.flowapp.models import Ledger
from tests.flowapp.workflows import note

ONCE = RetryPolicy(maximum_attempts=1)


def worked(ctx, key, pause=0.0, result=None):
    """A step's code: "start" row, sleep ``pause`` seconds, "end" row; returns ``result``."""
    token = uuid.uuid4().hex
    note(ctx, key, "start", token)
    time.sleep(pause)
    note(ctx, key, "end", token)
    return result


def runs_of(run_id, key, event="start"):
    return Ledger.objects.filter(run_id=run_id, key=key, event=event).count()


# -- parallel steps and fan-out ------------------------------------------------


@workflow(name="lang-parallel")
def parallel_sleepers(ctx):
    """``count`` steps of ``pause`` seconds each, at once; then one more step."""
    n, pause = ctx.input["count"], ctx.input["pause"]
    results = ctx.step.map("nap", lambda i: worked(ctx, f"nap[{i}]", pause, i * 10), range(n))
    ctx.step.run("after", lambda: worked(ctx, "after"))
    return results


@workflow(name="lang-parallel-failing", step_retry_policy=ONCE)
def parallel_failing(ctx):
    """Three members; the middle one fails for good: the others' results are kept, "after" never runs."""

    def broken():
        worked(ctx, "b")
        raise ValueError("b broke")

    ctx.step.parallel([("a", lambda: worked(ctx, "a", 0.2, "A")), ("b", broken), ("c", lambda: worked(ctx, "c", 0.2))])
    ctx.step.run("after", lambda: worked(ctx, "after"))


@workflow(name="lang-child")
def child(ctx):
    if ctx.input.get("fail"):
        ctx.step.run("explode", lambda: (_ for _ in ()).throw(NonRetryableError(f"child {ctx.input['i']} broke")))
    return ctx.step.run("work", lambda: {"i": ctx.input["i"], "run": str(ctx.run_id)})


@workflow(name="lang-fan-out")
def fan_out(ctx):
    """Start ``count`` children at once, collect every result, then one more step."""
    fail_at = ctx.input.get("fail_at")
    children = [
        ctx.step.start_workflow(child, {"i": i, "fail": i == fail_at}, name=f"child-{i}")
        for i in range(ctx.input["count"])
    ]
    results = ctx.step.wait_all(children)
    ctx.step.run("after", lambda: worked(ctx, "after"))
    return results


@workflow(name="lang-first-child")
def first_child(ctx):
    slow = ctx.step.start_workflow(sleepy_child, {"seconds": 30}, name="slow")
    fast = ctx.step.start_workflow(sleepy_child, {"seconds": 0}, name="fast")
    index, output = ctx.step.wait_first([slow, fast])
    return {"index": index, "output": output}


@workflow(name="lang-sleepy-child")
def sleepy_child(ctx):
    ctx.step.sleep("nap", f"{ctx.input['seconds']}s")
    return ctx.input["seconds"]


# -- timeouts ------------------------------------------------------------------


@workflow(name="lang-hang", step_retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="10ms"))
def hang(ctx):
    """A step that never returns in time, with a 1-second timeout and two attempts."""
    return ctx.step.run("hang", lambda: worked(ctx, "hang", 3600), timeout="1s")


@workflow(name="lang-quick")
def quick(ctx):
    return ctx.step.run("quick", lambda: worked(ctx, "quick", 0, ctx.input))


# -- compensation --------------------------------------------------------------


@workflow(name="lang-saga", retry_policy=ONCE, step_retry_policy=ONCE)
def saga(ctx):
    """Three steps with compensations, then a failure: they are undone c, b, a."""
    pause = ctx.input.get("undo_pause", 0)
    for name in ("a", "b", "c"):
        ctx.step.run(
            name, lambda n=name: worked(ctx, n, 0, n), compensate=lambda out: worked(ctx, f"undo-{out}", pause)
        )
    ctx.step.run("fail", lambda: (_ for _ in ()).throw(ValueError("the booking failed")))


# -- patches and continue-as-new ----------------------------------------------


@workflow(name="lang-patched")
def patched(ctx):
    ctx.step.run("first", lambda: 1)
    ctx.step.sleep("pause", ctx.input.get("pause", "0s"))
    if ctx.patched("bigger-total"):
        total = ctx.step.run("total-v2", lambda: 200)
    else:
        total = ctx.step.run("total", lambda: 100)
    return total


@workflow(name="lang-poller")
def poller(ctx):
    """Counts to ``until`` in rounds of 3 steps, handing over to a fresh run after each round."""
    count = ctx.input["count"]
    for _ in range(3):
        count = ctx.step.run("tick", lambda c=count: c + 1)
    if count >= ctx.input["until"]:
        return count
    ctx.continue_as_new({"count": count, "until": ctx.input["until"]})


# -- async workflows -----------------------------------------------------------


async def fetch(ctx, key, pause, value):
    await asyncio.sleep(pause)
    return value


@workflow(name="lang-async")
async def async_gather(ctx):
    """Three steps at once with asyncio.gather: two async, one sync (on a thread)."""
    a, b, c = await asyncio.gather(
        ctx.step.run("a", lambda: fetch(ctx, "a", 0.3, "A")),
        ctx.step.run("b", lambda: worked(ctx, "b", 0.3, "B")),
        ctx.step.run("c", lambda: fetch(ctx, "c", 0.3, "C")),
    )
    await ctx.step.sleep("pause", ctx.input.get("pause", "0s"))
    return [a, b, c]


# -- crashes in the middle -----------------------------------------------------


def hangs_first_time(ctx, key, result=None):
    """Ledgered work that hangs on its first execution only (the test kills that worker)."""
    token = uuid.uuid4().hex
    note(ctx, key, "start", token)
    if runs_of(ctx.run_id, key) == 1:
        time.sleep(300)
    note(ctx, key, "end", token)
    return result


@workflow(name="lang-parallel-crash")
def parallel_crash(ctx):
    """Six members: three finish at once, three hang the first time they run."""
    calls = [
        (
            f"m{i}",
            (lambda i=i: worked(ctx, f"m{i}", 0, i)) if i < 3 else (lambda i=i: hangs_first_time(ctx, f"m{i}", i)),
        )
        for i in range(6)
    ]
    return ctx.step.parallel(calls)


@workflow(name="lang-saga-crash", retry_policy=ONCE, step_retry_policy=ONCE)
def saga_crash(ctx):
    """As lang-saga, but undoing b hangs the first time (the test kills that worker)."""

    def undo(name):
        return hangs_first_time(ctx, f"undo-{name}") if name == "b" else worked(ctx, f"undo-{name}")

    for name in ("a", "b", "c"):
        ctx.step.run(name, lambda n=name: worked(ctx, n, 0, n), compensate=undo)
    ctx.step.run("fail", lambda: (_ for _ in ()).throw(ValueError("the booking failed")))


@workflow(name="lang-deploy")
def deployed(ctx):
    """Changed under running runs: a worker with OWF_TEST_NEW_CODE=1 runs the new code, behind a patch."""
    ctx.step.run("first", lambda: 1)
    if os.environ.get("OWF_TEST_NEW_CODE") == "1" and ctx.patched("bigger-total"):
        total = ctx.step.run("total-v2", lambda: 200)
    else:
        total = ctx.step.run("total", lambda: 100)
    ctx.step.sleep("pause", ctx.input["pause"])
    return total


@workflow(name="lang-cancel-saga", compensate_on_cancel=True)
def cancel_saga(ctx):
    """Two steps with compensations, then a long sleep: canceling it undoes b, then a."""
    for name in ("a", "b"):
        ctx.step.run(name, lambda n=name: worked(ctx, n, 0, n), compensate=lambda out: worked(ctx, f"undo-{out}"))
    ctx.step.sleep("wait", "1h")
    ctx.step.run("c", lambda: worked(ctx, "c"))


@workflow(name="lang-cancel-in-wait", compensate_on_cancel=True)
def cancel_in_wait(ctx):
    """A compensated step, then a wait for a signal: canceled while it waits."""
    ctx.step.run("a", lambda: worked(ctx, "a", 0, "a"), compensate=lambda out: worked(ctx, f"undo-{out}"))
    ctx.step.wait_for_signal("go", timeout="1h")
    ctx.step.run("b", lambda: worked(ctx, "b"))


@workflow(name="lang-cancel-while-held", compensate_on_cancel=True)
def cancel_while_held(ctx):
    """Canceled while its worker executes the long step b: b completes, is undone, and c never runs."""
    for name, pause in (("a", 0), ("b", 1.5)):
        ctx.step.run(
            name, lambda n=name, p=pause: worked(ctx, n, p, n), compensate=lambda out: worked(ctx, f"undo-{out}")
        )
    ctx.step.run("c", lambda: worked(ctx, "c"))


@workflow(name="lang-continuing-child-parent")
def continuing_child_parent(ctx):
    """Waits for a child that continues as new twice: the result is the chain's."""
    child = ctx.step.start_workflow(poller, {"count": 0, "until": 9})
    (total,) = ctx.step.wait_all([child])
    return {"total": total, "single": ctx.step.run_workflow(poller, {"count": 0, "until": 6}, name="one")}
