"""What a workflow can express: parallel steps, fan-out, timeouts, compensation, patches, continue-as-new, async.

Most tests run real ``manage.py runworkflows`` processes on the test
database (SQLite, PostgreSQL or MariaDB, whichever the run is on). The
workflows are in tests/fixtures/languageapp/workflows.py; their steps write
:class:`~tests.fixtures.flowapp.models.Ledger` rows, committed at once, so a test
counts how often each step's code ran, in any process, and orders events
by the rows' ids rather than by clocks.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import Counter

import pytest
from django.test import override_settings
from django.urls import reverse

from django_openworkflow import RetryPolicy, StepUsageError, workflow
from django_openworkflow.client import operations
from django_openworkflow.errors import OperationRefused, WorkflowRegistrationError
from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING, is_parked, wait_until
from tests.fixtures.flowapp.models import Ledger
from tests.fixtures.languageapp import workflows as lang

pytestmark = pytest.mark.django_db(transaction=True)

TRACE: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")

FAST = ("--poll", "20ms")


def started(run_id, key=None):
    """How many times each step's code started (or ``key``'s)."""
    rows = Ledger.objects.filter(run_id=run_id, event="start")
    counts = Counter(rows.values_list("key", flat=True))
    return counts[key] if key is not None else counts


def ledger(run_id):
    """(key, event) in the order they happened, across processes."""
    return list(Ledger.objects.filter(run_id=run_id).order_by("id").values_list("key", "event"))


def journal(run_id):
    return list(StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id").values_list("step_name", "status"))


def finished(handle) -> bool:
    return handle.status() in ("completed", "failed", "canceled")


# -- parallel steps ----------------------------------------------------------------


def test_ten_parallel_sleeping_steps_overlap(workers):
    handle = lang.parallel_sleepers.run({"count": 10, "pause": 1.0})
    began = time.monotonic()
    workers.start("--concurrency", "2", *FAST)
    wait_until(lambda: finished(handle), timeout=CEILING)
    print(f"10 parallel steps of 1 s took {time.monotonic() - began:.2f} s, worker start included")
    assert handle.result() == [i * 10 for i in range(10)]
    events = ledger(handle.id)
    first_end = next(i for i, (_, event) in enumerate(events) if event == "end")
    # Clock-free: every member had started before any of them ended.
    assert sum(1 for key, event in events[:first_end] if event == "start" and key.startswith("nap[")) == 10
    assert [name for name, _ in journal(handle.id)] == [f"nap[{i}]" for i in range(10)] + ["after"]


def test_a_killed_worker_reruns_only_the_unfinished_members(workers):
    handle = lang.parallel_crash.run({})
    victim = workers.start("--concurrency", "2", "--lease", "1s", *FAST)
    # Three members finished (and were journaled) while three hang. Wait for
    # each hanging member's own start: under load m3's note can commit after
    # m5's, and a member killed before its note would hang again on the re-run.
    wait_until(
        lambda: (
            StepAttempt.objects.filter(workflow_run_id=handle.id, status="completed").count() == 3
            and all(started(handle.id, key) == 1 for key in ("m3", "m4", "m5"))
        ),
        timeout=CEILING,
    )
    victim.kill()
    victim.wait(10)
    workers.start("--concurrency", "2", "--lease", "1s", *FAST)
    wait_until(lambda: finished(handle), timeout=CEILING)
    assert handle.result() == [0, 1, 2, 3, 4, 5]
    assert started(handle.id) == {"m0": 1, "m1": 1, "m2": 1, "m3": 2, "m4": 2, "m5": 2}


def test_a_member_failing_for_good_fails_the_group_and_keeps_the_others(run_worker):
    handle = lang.parallel_failing.run({})
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    run = handle.fetch()
    assert run.status == "failed" and run.error["step"] == "b" and "b broke" in run.error["message"]
    assert dict(journal(handle.id)) == {"a": "completed", "b": "failed", "c": "completed"}
    assert StepAttempt.objects.get(workflow_run_id=handle.id, step_name="a").output == "A"
    assert started(handle.id, "after") == 0


def test_parallel_refuses_bad_calls_and_steps_from_member_threads(run_worker):
    @workflow(name="lang-parallel-misuse")
    def misuse(ctx):
        errors = []
        for bad in (lambda: ctx.step.parallel(["not a pair"]), lambda: ctx.step.parallel([], max_workers=0)):
            try:
                bad()
            except StepUsageError as exc:
                errors.append(str(exc))
        (nested,) = ctx.step.parallel([("outer", lambda: _nested(ctx))])
        return errors + [nested]

    def _nested(ctx):
        try:
            ctx.step.run("inner", lambda: 1)
        except StepUsageError as exc:
            return str(exc)
        return "nested step ran"

    handle = misuse.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    first, second, nested = handle.result()
    assert "(name, fn) pairs" in first and "max_workers must be a positive integer" in second
    assert "from another thread" in nested


# -- fan-out -----------------------------------------------------------------------


def test_fan_out_collects_300_results_from_300_distinct_children(workers):
    handle = lang.fan_out.run({"count": 300})
    began = time.monotonic()
    workers.start("--concurrency", "10", *FAST)
    wait_until(lambda: finished(handle), timeout=CEILING)
    print(f"fan-out of 300 children took {time.monotonic() - began:.2f} s, worker start included")
    results = handle.result()
    assert [r["i"] for r in results] == list(range(300))
    children = set(WorkflowRun.objects.filter(workflow_name="lang-child").values_list("id", flat=True))
    assert len(children) == 300 and {r["run"] for r in results} == {str(c) for c in children}
    assert {child.id for child in handle.children()} == children
    assert started(handle.id, "after") == 1


def test_fan_out_with_a_failed_child_fails_the_parent_before_its_next_step(workers):
    handle = lang.fan_out.run({"count": 300, "fail_at": 150})
    workers.start("--concurrency", "10", *FAST)
    wait_until(lambda: finished(handle), timeout=CEILING)
    run = handle.fetch()
    assert run.status == "failed" and run.error["step"] == "child-150"
    assert "ChildWorkflowFailed" in run.error["message"]
    assert started(handle.id, "after") == 0
    failed_child = WorkflowRun.objects.get(workflow_name="lang-child", input__i=150)
    assert failed_child.status == "failed"


def test_wait_first_returns_the_child_that_finished_first(run_worker):
    handle = lang.first_child.run({})
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert handle.result() == {"index": 1, "output": 0}
    winner = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="wait_first")
    assert winner.output["index"] == 1


def test_a_parent_waiting_for_many_children_is_woken_by_the_child_it_watches_only(run_worker):
    handle = lang.fan_out.run({"count": 5})
    slices = []
    from django_openworkflow import hooks

    def count(sender, run_id, **kwargs):
        if run_id == handle.id:
            slices.append(kwargs.get("reason"))

    hooks.run_parked.connect(count)
    try:
        run_worker(until=lambda: finished(handle), timeout=CEILING, concurrency=1)
    finally:
        hooks.run_parked.disconnect(count)
    assert handle.status() == "completed"
    # One child at a time (one slot): woken on every child's end, the parent would park 5 times.
    assert 1 <= len(slices) < 5, slices


# -- step timeouts -----------------------------------------------------------------


def test_a_step_that_never_returns_times_out_is_retried_and_the_slot_comes_back(workers):
    hung = lang.hang.run({})
    workers.start("--concurrency", "1", *FAST)
    wait_until(lambda: started(hung.id, "hang") == 1, timeout=CEILING)
    quick = [lang.quick.run({"n": i}) for i in range(3)]
    wait_until(lambda: finished(hung) and all(finished(q) for q in quick), timeout=CEILING)
    run = hung.fetch()
    assert run.status == "failed"
    assert run.error["step"] == "hang" and "StepTimeout" in run.error["message"]
    assert "timeout of 1s" in run.error["message"]
    assert started(hung.id, "hang") == 2  # two attempts, each abandoned after 1 s
    assert [q.result() for q in quick] == [{"n": i} for i in range(3)]
    attempts = StepAttempt.objects.filter(workflow_run_id=hung.id, step_name="hang")
    assert [a.error["type"] for a in attempts] == ["StepTimeout"] * 2


def test_step_timeout_is_validated():
    with pytest.raises(WorkflowRegistrationError, match="step_timeout"):

        @workflow(name="lang-bad-timeout", step_timeout="soon")
        def bad(ctx):
            pass


def test_an_atomic_step_refuses_a_timeout(run_worker):
    @workflow(name="lang-atomic-timeout", retry_policy=RetryPolicy(maximum_attempts=1))
    def atomic_timeout(ctx):
        ctx.step.run("write", lambda: 1, atomic=True, timeout="1s")

    handle = atomic_timeout.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert "cannot have a timeout" in handle.fetch().error["message"]


# -- compensation ------------------------------------------------------------------


def test_compensations_run_in_reverse_order_once(run_worker):
    handle = lang.saga.run({})
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    run = handle.fetch()
    assert run.status == "failed" and "the booking failed" in run.error["message"]
    assert [key for key, event in ledger(handle.id) if key.startswith("undo-") and event == "start"] == [
        "undo-c",
        "undo-b",
        "undo-a",
    ]
    assert journal(handle.id)[-3:] == [
        ("compensate:c", "completed"),
        ("compensate:b", "completed"),
        ("compensate:a", "completed"),
    ]


def test_compensations_survive_a_worker_killed_between_them(workers):
    handle = lang.saga_crash.run({})
    victim = workers.start("--concurrency", "1", "--lease", "1s", *FAST)
    wait_until(lambda: started(handle.id, "undo-b") == 1, timeout=CEILING)
    victim.kill()
    victim.wait(10)
    workers.start("--concurrency", "1", "--lease", "1s", *FAST)
    wait_until(lambda: finished(handle), timeout=CEILING)
    assert handle.status() == "failed"
    counts = started(handle.id)
    assert counts["undo-c"] == 1 and counts["undo-a"] == 1  # finished before and after the kill: once each
    assert counts["undo-b"] == 2  # the one the kill interrupted runs again
    ends = [key for key, event in ledger(handle.id) if event == "end" and key.startswith("undo-")]
    assert ends == ["undo-c", "undo-b", "undo-a"]


def test_cancel_runs_the_compensations_when_the_workflow_asks_for_it(run_worker):
    from django_openworkflow import hooks

    handle = lang.cancel_saga.run({})
    run_worker(until=lambda: is_parked(handle), timeout=CEILING)
    heard = []

    def finished_hook(sender, run_id, status, **kwargs):
        heard.append((run_id, status))

    hooks.run_finished.connect(finished_hook)
    try:
        assert handle.cancel() is True
        run = handle.fetch()
        assert run.status == "running" and run.cancel_requested_at is not None  # a worker compensates first
        assert heard == [] and handle.fetch().worker_id is None
        with pytest.raises(OperationRefused, match="being canceled already"):
            operations.cancel(handle.id)
        run_worker(until=lambda: handle.status() == "canceled", timeout=CEILING)
    finally:
        hooks.run_finished.disconnect(finished_hook)
    assert heard == [(handle.id, "canceled")]
    assert [key for key, event in ledger(handle.id) if event == "start"] == ["a", "b", "undo-b", "undo-a"]
    steps = dict(journal(handle.id))
    assert steps["wait"] == "failed" and steps["compensate:b"] == steps["compensate:a"] == "completed"
    assert "c" not in steps and handle.fetch().error["type"] == "Canceled"


def test_a_run_that_never_started_is_canceled_at_once_even_with_compensate_on_cancel():
    handle = lang.cancel_saga.run({}, available_at="1h")
    assert handle.cancel() is True and handle.status() == "canceled"


def test_a_run_canceled_while_it_waits_for_a_signal_compensates_once_and_ends_canceled(run_worker):
    handle = lang.cancel_in_wait.run({})
    run_worker(until=lambda: is_parked(handle), timeout=CEILING)
    assert handle.cancel() is True
    run_worker(until=lambda: handle.status() == "canceled", timeout=CEILING)
    assert [key for key, event in ledger(handle.id) if event == "start"] == ["a", "undo-a"]
    assert dict(journal(handle.id))["go"] == "failed"  # the wait is closed with the run


def test_a_cancel_while_a_worker_holds_the_run_keeps_the_step_it_was_running_and_undoes_it(workers):
    handle = lang.cancel_while_held.run({})
    workers.start("--concurrency", "1", "--lease", "1s", *FAST)
    wait_until(lambda: started(handle.id, "b") == 1, timeout=CEILING)
    assert handle.cancel() is True  # while b's code runs
    wait_until(lambda: handle.status() == "canceled", timeout=CEILING)
    events = [(key, event) for key, event in ledger(handle.id)]
    # b finished and was undone (its completion was kept), c never ran.
    assert events == [
        ("a", "start"),
        ("a", "end"),
        ("b", "start"),
        ("b", "end"),
        ("undo-b", "start"),
        ("undo-b", "end"),
        ("undo-a", "start"),
        ("undo-a", "end"),
    ]


# -- patches -----------------------------------------------------------------------


def test_a_patch_lets_old_and_new_runs_each_finish_on_their_own_branch(workers, monkeypatch):
    old_run = lang.deployed.run({"pause": "2s"})
    old_worker = workers.start(*FAST)
    # The old code went past the patch point ("total") and sleeps.
    wait_until(
        lambda: StepAttempt.objects.filter(workflow_run_id=old_run.id, step_name="pause").exists(), timeout=CEILING
    )
    old_worker.kill()
    old_worker.wait(10)
    monkeypatch.setenv("OWF_TEST_NEW_CODE", "1")  # the deploy
    new_run = lang.deployed.run({"pause": "0s"})
    workers.start(*FAST)
    wait_until(lambda: finished(old_run) and finished(new_run), timeout=CEILING)
    assert old_run.result() == 100 and new_run.result() == 200
    assert [name for name, _ in journal(old_run.id)] == ["first", "total", "pause"]
    assert [name for name, _ in journal(new_run.id)] == ["first", "patch:bigger-total", "total-v2", "pause"]


# -- continue-as-new ---------------------------------------------------------------


def test_continue_as_new_hands_over_to_a_fresh_run(run_worker):
    handle = lang.poller.run({"count": 0, "until": 9})
    run_worker(until=lambda: WorkflowRun.objects.filter(workflow_name="lang-poller", status="completed").exists())
    assert handle.result() == 9  # followed to the end of the chain
    chain = [handle]
    while (successor := chain[-1].successor()) is not None:
        chain.append(successor)
    assert [h.status() for h in chain] == ["continued", "continued", "completed"]
    assert [h.fetch().input["count"] for h in chain] == [0, 3, 6]
    assert all(len(journal(h.id)) == 3 for h in chain)  # each run's journal starts empty
    assert chain[2].predecessor() == chain[1] and chain[0].predecessor() is None


def test_continue_as_new_refuses_an_unknown_version(run_worker):
    @workflow(name="lang-continue-bad", retry_policy=RetryPolicy(maximum_attempts=1))
    def continue_bad(ctx):
        ctx.continue_as_new({}, version="v404")

    handle = continue_bad.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert "has no version 'v404'" in handle.fetch().error["message"]


def test_a_parent_waits_for_a_child_through_its_continue_as_new(run_worker):
    handle = lang.continuing_child_parent.run({})
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert handle.result() == {"total": 9, "single": 6}


# -- async workflows ---------------------------------------------------------------


def test_async_and_sync_workflows_side_by_side_in_one_worker(workers):
    async_run = lang.async_gather.run({"pause": "100ms"})
    sync_run = lang.quick.run({"n": 1})
    workers.start("--concurrency", "2", *FAST)
    wait_until(lambda: finished(async_run) and finished(sync_run), timeout=CEILING)
    assert async_run.result() == ["A", "B", "C"] and sync_run.result() == {"n": 1}
    assert [name for name, _ in journal(async_run.id)] == ["a", "b", "c", "pause"] or sorted(
        name for name, _ in journal(async_run.id)
    ) == ["a", "b", "c", "pause"]
    assert started(async_run.id, "b") == 1  # replayed after the sleep, not run again


def test_async_gather_assigns_names_in_call_order_not_completion_order(run_worker):
    @workflow(name="lang-async-order")
    async def ordered(ctx):
        async def slow():
            await asyncio.sleep(0.2)
            return "slow"

        async def fast():
            return "fast"

        return await asyncio.gather(ctx.step.run("x", slow), ctx.step.run("x", fast))

    handle = ordered.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert handle.result() == ["slow", "fast"]
    outputs = dict(StepAttempt.objects.filter(workflow_run_id=handle.id).values_list("step_name", "output"))
    assert outputs == {"x": "slow", "x:1": "fast"}


def test_async_step_timeout_cancels_the_coroutine(run_worker):
    cancelled = []

    async def forever():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    @workflow(name="lang-async-timeout", step_retry_policy=RetryPolicy(maximum_attempts=1))
    async def timed(ctx):
        await ctx.step.run("forever", forever, timeout="200ms")

    handle = timed.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert handle.fetch().error["type"] == "StepFailed"
    assert "StepTimeout" in handle.fetch().error["message"] and cancelled == [True]


# -- seen in the admin -------------------------------------------------------------


def test_the_admin_links_a_chain_of_runs_and_says_a_run_is_being_canceled(admin_client, run_worker):
    def page(run_id):
        url = reverse("admin:django_openworkflow_workflowrun_change", args=[run_id])
        return admin_client.get(url).content.decode()

    first = lang.poller.run({"count": 0, "until": 6})
    run_worker(until=lambda: WorkflowRun.objects.filter(workflow_name="lang-poller", status="completed").exists())
    second = first.successor()
    assert "Continued as" in page(first.id) and str(second.id)[:8] in page(first.id)
    assert "Continued from" in page(second.id) and str(first.id)[:8] in page(second.id)
    assert "owf-status-continued" in page(first.id)

    saga = lang.cancel_saga.run({})
    run_worker(until=lambda: is_parked(saga), timeout=CEILING)
    saga.cancel()
    assert "a worker runs the compensations of its completed steps" in page(saga.id)


def test_an_async_steps_own_timeout_error_is_its_error_not_a_step_timeout(run_worker):
    async def remote_call():
        raise TimeoutError("the remote service timed out")

    @workflow(name="lang-async-own-timeout", step_retry_policy=RetryPolicy(maximum_attempts=1))
    async def own_timeout(ctx):
        await ctx.step.run("call", remote_call)

    @workflow(name="lang-async-own-timeout-limited", step_retry_policy=RetryPolicy(maximum_attempts=1))
    async def own_timeout_limited(ctx):
        await ctx.step.run("call", remote_call, timeout="10s")

    for spec in (own_timeout, own_timeout_limited):
        handle = spec.run()
        run_worker(until=lambda h=handle: finished(h), timeout=CEILING)
        message = handle.fetch().error["message"]
        assert "TimeoutError: the remote service timed out" in message and "StepTimeout" not in message


def test_an_async_signal_wait_refuses_while_other_steps_still_run(run_worker):
    async def slow():
        await asyncio.sleep(0.2)
        return 1

    @workflow(name="lang-async-wait-busy", retry_policy=RetryPolicy(maximum_attempts=1))
    async def busy(ctx):
        running = asyncio.ensure_future(ctx.step.run("slow", slow))
        try:
            await ctx.step.wait_for_signal("go")
        finally:
            await running

    handle = busy.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert "await them first" in handle.fetch().error["message"]
    assert dict(journal(handle.id)) == {"slow": "completed"}


# -- promises of the thread runner -------------------------------------------------


def test_a_timed_out_members_thread_is_counted_until_its_code_returns():
    from django_openworkflow.engine.threads import abandoned_threads, run_on_threads

    release = threading.Event()
    before = abandoned_threads()
    (timed_out,) = next(run_on_threads([(release.wait, 0.05)], 1, lambda: None))
    assert timed_out.timed_out and abandoned_threads() == before + 1
    release.set()
    wait_until(lambda: abandoned_threads() == before, timeout=CEILING)


def test_parallel_members_see_the_workflows_context_variables(run_worker):
    @workflow(name="lang-parallel-context")
    def with_context(ctx):
        token = TRACE.set(f"trace-{ctx.run_id}")
        try:
            return ctx.step.parallel([("a", TRACE.get), ("b", TRACE.get)])
        finally:
            TRACE.reset(token)

    handle = with_context.run()
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    assert handle.result() == [f"trace-{handle.id}"] * 2


@override_settings(OPENWORKFLOW={"MAX_STEP_ATTEMPTS": 3, "POLL_INTERVAL": "20ms"})
def test_a_parallel_group_that_would_pass_the_step_limit_fails_the_run_before_it_starts(run_worker):
    handle = lang.parallel_sleepers.run({"count": 5, "pause": 0})
    run_worker(until=lambda: finished(handle), timeout=CEILING)
    run = handle.fetch()
    assert run.status == "failed" and run.error["type"] == "StepLimitExceeded"
    assert started(handle.id) == {} and journal(handle.id) == []
