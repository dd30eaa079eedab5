"""Workflows the test suite runs, in-process and in worker subprocesses."""

import os
import time

from django_openworkflow import NonRetryableError, RetryPolicy, workflow

from .models import SideEffect


def record(ctx, step):
    SideEffect.objects.create(run_id=ctx.run_id, step=step)


def executions(ctx, step):
    return SideEffect.objects.filter(run_id=ctx.run_id, step=step).count()


@workflow(name="three-steps")
def three_steps(ctx):
    """Each step records a side effect; step k+1 uses step k's output."""

    def step1():
        record(ctx, "one")
        return {"n": (ctx.input or {}).get("start", 1)}

    def step2(prev):
        record(ctx, "two")
        if (ctx.input or {}).get("hang_first_time") and executions(ctx, "two") == 1:
            time.sleep(300)  # killed here by the test
        return prev["n"] * 10

    def step3(prev):
        record(ctx, "three")
        return prev + 1

    a = ctx.step.run("one", step1)
    b = ctx.step.run("two", lambda: step2(a))
    c = ctx.step.run("three", lambda: step3(b))
    return {"result": c}


@workflow(name="sleeper")
def sleeper(ctx):
    before = ctx.step.run("before", lambda: record(ctx, "before") or "ok")
    ctx.step.sleep("nap", (ctx.input or {}).get("duration", "1s"))
    ctx.step.run("after", lambda: record(ctx, "after"))
    return before


@workflow(name="always-fails", step_retry_policy=RetryPolicy(maximum_attempts=1))
def always_fails(ctx):
    def boom():
        record(ctx, "boom")
        raise ValueError("kaboom")

    ctx.step.run("boom", boom)
    return "unreachable"


@workflow(name="non-retryable")
def non_retryable(ctx):
    def boom():
        record(ctx, "boom")
        raise NonRetryableError("card declined")

    ctx.step.run("charge", boom)


@workflow(name="bad-output")
def bad_output(ctx):
    ctx.step.run("make", lambda: object())


@workflow(name="slow-steps")
def slow_steps(ctx):
    """Steps that take a while, for fencing tests."""
    for i in range((ctx.input or {}).get("steps", 3)):
        ctx.step.run("tick", lambda: (record(ctx, "tick"), time.sleep((ctx.input or {}).get("pause", 0.2)))[1])
    return "done"


@workflow(name="versioned", version="v1")
def versioned_v1(ctx):
    return "v1"


@workflow(name="versioned", version="v2")
def versioned_v2(ctx):
    return "v2"


@workflow(name="kills-its-worker", step_retry_policy=RetryPolicy(maximum_attempts=2))
def kills_its_worker(ctx):
    """The first step takes its worker process down every time (think OOM or segfault)."""

    def die():
        record(ctx, "die")
        os._exit(9)

    ctx.step.run("die", die)
    return "unreachable"


@workflow(name="approval")
def approval(ctx):
    """Waits for signals; the step after the wait hangs the first time if asked (for crash tests)."""
    inp = ctx.input or {}
    decisions = [
        ctx.step.wait_for_signal("approval", timeout=inp.get("timeout", "1h")) for _ in range(inp.get("waits", 1))
    ]

    def use():
        record(ctx, "use")
        if inp.get("hang_first_time") and executions(ctx, "use") == 1:
            time.sleep(300)
        return decisions

    result = ctx.step.run("use", use)
    if inp.get("hold"):
        ctx.step.sleep("hold", "1h")
    return result


@workflow(name="await-payment")
def await_payment(ctx):
    return ctx.step.wait_for_event(
        "paid",
        event="order.paid",
        match={"order": {"id": ctx.input["order_id"]}},
        timeout=ctx.input.get("timeout", "1h"),
    )


@workflow(name="atomic-write")
def atomic_write(ctx):
    """An atomic step writes a row, then hangs the first time (the marker file says which time it is)."""
    marker = ctx.input["hang_marker"]

    def write():
        record(ctx, "write")
        if not os.path.exists(marker):
            open(marker, "w").close()
            time.sleep(300)  # killed here, after the write, before the commit
        return "written"

    return ctx.step.run("write", write, atomic=True)


@workflow(name="chaos-5", step_retry_policy=RetryPolicy(initial_interval="50ms", maximum_attempts=0))
def chaos_5(ctx):
    """Five steps with a short sleep and a step that fails its first attempt; each records a side effect."""

    pause = (ctx.input or {}).get("pause", 0)

    def effect(step, value):
        record(ctx, step)
        time.sleep(pause)
        return value

    def flaky():
        record(ctx, "s3")
        if executions(ctx, "s3") == 1:
            raise RuntimeError("first attempt fails on purpose")
        return 3

    total = ctx.step.run("s1", lambda: effect("s1", 1))
    total += ctx.step.run("s2", lambda: effect("s2", 2))
    ctx.step.sleep("nap", "100ms")
    total += ctx.step.run("s3", flaky)
    total += ctx.step.run("s4", lambda: effect("s4", 4))
    total += ctx.step.run("s5", lambda: effect("s5", 5))
    return total


@workflow(name="exits-in-a-step", step_retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="10ms"))
def exits_in_a_step(ctx):
    """sys.exit() (a BaseException) inside a step's code."""

    def leave():
        record(ctx, "leave")
        raise SystemExit(3)

    return ctx.step.run("leave", leave)


@workflow(name="exits-in-the-body")
def exits_in_the_body(ctx):
    """sys.exit() from the workflow function itself, after a step."""
    ctx.step.run("first", lambda: record(ctx, "first"))
    raise SystemExit("bye")


@workflow(name="poison-write", step_retry_policy=RetryPolicy(maximum_attempts=5, initial_interval="10ms"))
def poison_write(ctx):
    """A step whose completion the database refuses (a trigger in the test makes it so)."""
    return ctx.step.run("poison-write", lambda: record(ctx, "poison-write") or "done")


@workflow(name="hangs-first-time")
def hangs_first_time(ctx):
    """A step that never returns the first time it runs (the worker is stopped under it), and returns after."""

    def step():
        record(ctx, "hang")
        if executions(ctx, "hang") == 1:
            time.sleep(3600)
        return "finished"

    return ctx.step.run("hang", step)


@workflow(name="poison-payloads", step_retry_policy=RetryPolicy(maximum_attempts=3, initial_interval="10ms"))
def poison_payloads(ctx):
    """A step that returns, raises or is named with text no database stores (ctx.input["where"] picks which)."""
    where = ctx.input["where"]
    bad = "charge\x00card" if ctx.input.get("nul", True) else "charge\ud800card"

    def step():
        record(ctx, "step")
        if where == "message":
            raise ValueError(f"declined: {bad}")
        return {"receipt": bad}

    return ctx.step.run(bad if where == "name" else "charge", step)


@workflow(name="atomic-write-to", step_retry_policy=RetryPolicy(maximum_attempts=1))
def atomic_write_to(ctx):
    """An atomic step writing to the database alias ``ctx.input["database"]``."""

    def write():
        SideEffect.objects.using(ctx.input["database"]).create(run_id=ctx.run_id, step="atomic")
        return "written"

    return ctx.step.run("write", write, atomic=True)


@workflow(name="fails-at-three", step_retry_policy=RetryPolicy(maximum_attempts=1))
def fails_at_three(ctx):
    """Three steps; the third fails the first time it runs (so the run fails), and succeeds after."""
    one = ctx.step.run("one", lambda: record(ctx, "one") or 1)
    two = ctx.step.run("two", lambda: record(ctx, "two") or one + 1)

    def three():
        record(ctx, "three")
        if executions(ctx, "three") == 1:
            raise ValueError("the third step fails once")
        return two + 1

    return ctx.step.run("three", three)
