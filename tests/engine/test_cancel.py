"""A cancel asked while a step runs is seen at the slice's next write, not only by a heartbeat.

Each test runs an in-process worker with the default lease (30 s, a
heartbeat every 10 s): the cancel is asked while a step's code waits for
it, and the step returns at once, long before any heartbeat.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections

from django_openworkflow import workflow
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.states import StepKind, StepStatus
from django_openworkflow.store import get_backend
from django_openworkflow.store.records import AttemptUpdate, CancelRequested, ChildStart, Fence, LeaseLost, NewAttempt
from tests.conftest import CEILING

pytestmark = pytest.mark.django_db(transaction=True)

FINISHED = ("completed", "failed", "canceled")

# Written by the worker's slot thread, read by the test after the worker stopped.
events: list[str] = []
# Set by the step's code when it runs, and by the canceling thread once the cancel is asked.
in_step = threading.Event()
asked = threading.Event()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    events.clear()
    in_step.clear()
    asked.clear()
    yield


def wait_for_cancel(name: str) -> str:
    """A step's code that runs until someone has asked to cancel its run."""
    events.append(name)
    in_step.set()
    assert asked.wait(30), "nobody canceled the run"
    return name


def undo(name: str) -> None:
    events.append(f"undo-{name}")


@workflow(name="test-cancel-mid-step", compensate_on_cancel=True)
def saga(ctx):
    ctx.step.run("a", lambda: events.append("a") or "a", compensate=lambda _: undo("a"))
    ctx.step.run("b", lambda: wait_for_cancel("b"), compensate=lambda _: undo("b"))
    then = ctx.input["then"]
    if then == "step":
        ctx.step.run("c", lambda: events.append("c"), compensate=lambda _: undo("c"))
    elif then == "sleep":
        ctx.step.sleep("nap", "1h")
    elif then == "child":
        ctx.step.run_workflow("test-cancel-child", {})
    elif then == "children":
        ctx.step.wait_all([ctx.step.start_workflow("test-cancel-child", {})])
    elif then == "parallel":
        ctx.step.parallel([("p1", lambda: events.append("p1")), ("p2", lambda: events.append("p2"))])
    elif then == "signal":
        ctx.step.wait_for_signal("go", timeout="1h")
    elif then == "continue":
        ctx.continue_as_new({"then": "return"})
    return "done"


@workflow(name="test-cancel-child")
def child(ctx):
    events.append("child")


@workflow(name="test-plain-cancel-mid-step")
def plain(ctx):
    ctx.step.run("a", lambda: events.append("a"))
    ctx.step.run("b", lambda: wait_for_cancel("b"))
    ctx.step.run("c", lambda: events.append("c"))


def cancel_during_the_step(handle) -> threading.Thread:
    """A thread that cancels ``handle`` once a step waits for it (as another process would)."""

    def cancel() -> None:
        try:
            assert in_step.wait(30), "the step never ran"
            assert handle.cancel() is True
        finally:
            asked.set()
            connections.close_all()

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


@pytest.mark.parametrize("then", ["step", "parallel", "sleep", "signal", "child", "children", "continue", "return"])
def test_a_cancel_asked_during_a_step_compensates_and_ends_canceled_before_any_heartbeat(run_worker, then):
    handle = saga.run({"then": then})
    canceler = cancel_during_the_step(handle)
    run_worker(until=lambda: handle.status() in FINISHED, timeout=CEILING)  # the default lease: 30 s
    canceler.join()

    run = handle.fetch()
    assert (run.status, run.error["type"]) == ("canceled", "Canceled")
    # b finished and is kept, so it is undone; nothing after it started: no step, wait, child, successor
    # or completion.
    assert events == ["a", "b", "undo-b", "undo-a"]
    assert WorkflowRun.objects.count() == 1
    attempts = StepAttempt.objects.filter(workflow_run_id=handle.id).order_by("id")
    journal = list(attempts.values_list("step_name", "status"))
    assert journal == [
        ("a", "completed"),
        ("b", "completed"),
        ("compensate:b", "completed"),
        ("compensate:a", "completed"),
    ]


def test_a_plain_cancel_during_a_step_ends_the_run_at_once_and_nothing_after_the_step_runs():
    handle = plain.run({})
    (claimed,) = get_backend().claim("worker-a", 1, timedelta(seconds=30))
    canceler = cancel_during_the_step(handle)
    # The step that ran finishes; the write of its completion is refused, and nothing after it runs.
    assert execute_slice(get_backend(), claimed).outcome == Outcome.LEASE_LOST
    canceler.join()
    assert handle.status() == "canceled"
    assert events == ["a", "b"]


def test_a_write_refused_for_a_cancel_request_keeps_its_completions_and_starts_nothing():
    store = get_backend()
    run_id = plain.run({}).id
    store.claim("w1", 1, timedelta(seconds=30))
    now = store.now()
    first = store.record_step(Fence(run_id, "w1", now), NewAttempt("a", StepKind.RUN, StepStatus.RUNNING, now))
    assert store.request_cancel([run_id]) == [run_id]
    pending = [
        AttemptUpdate(first, StepStatus.COMPLETED, now, output=1),
        NewAttempt("b", StepKind.RUN, StepStatus.COMPLETED, now, output=2, finished_at=now),
        NewAttempt("kid", StepKind.WORKFLOW, StepStatus.RUNNING, now, child=ChildStart("test-cancel-child", None, {})),
    ]
    with pytest.raises(CancelRequested):
        store.record_step(
            Fence(run_id, "w1", now, pending, unless_canceling=True),
            NewAttempt("c", StepKind.RUN, StepStatus.RUNNING, now),
        )
    with pytest.raises(CancelRequested):
        store.complete_run(Fence(run_id, "w1", now, unless_canceling=True), "done", None)
    attempts = StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id")
    assert list(attempts.values_list("step_name", "status")) == [("a", "completed"), ("b", "completed")]
    assert WorkflowRun.objects.count() == 1 and WorkflowRun.objects.get().status == "running"
    # A compensation's write does not ask, and goes through; another worker's is refused as ever.
    store.record_step(Fence(run_id, "w1", now), NewAttempt("compensate:b", StepKind.RUN, StepStatus.RUNNING, now))
    with pytest.raises(LeaseLost):
        store.complete_run(Fence(run_id, "w2", now, unless_canceling=True), "done", None)
