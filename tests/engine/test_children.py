"""ctx.step.run_workflow: exactly-once children, prompt wake-ups, failures and timeouts."""

from __future__ import annotations

import pytest

from django_openworkflow import RetryPolicy, StepFailed, get_run, workflow
from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING
from tests.fixtures.testapp.workflows import record

pytestmark = pytest.mark.django_db(transaction=True)


@workflow(name="test-child")
def child(ctx):
    mode = ctx.input.get("mode", "ok")
    if mode == "sleep":
        ctx.step.sleep("nap", ctx.input["duration"])
    if mode == "fail":
        ctx.step.run(
            "explode",
            lambda: (_ for _ in ()).throw(ValueError("child broke")),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )
    return ctx.step.run("double", lambda: ctx.input["n"] * 2)


@workflow(name="test-parent")
def parent(ctx):
    ctx.step.run("before", lambda: record(ctx, "before"))
    try:
        value = ctx.step.run_workflow(child, ctx.input["child"], timeout=ctx.input.get("timeout", "1y"))
    except StepFailed as exc:
        return {"failed": exc.error["type"], "child_error": (exc.error.get("child_error") or {}).get("type")}
    ctx.step.run("after", lambda: record(ctx, "after"))
    return {"child": value}


@workflow(name="test-parent-by-name")
def parent_by_name(ctx):
    return ctx.step.run_workflow("test-child", {"n": 1}, name="kid")


def child_runs(handle):
    return WorkflowRun.objects.filter(parent_step_attempt__workflow_run_id=handle.id)


def test_child_result_returns_to_the_parent_and_child_starts_once(run_worker):
    handle = parent.run({"child": {"n": 21}})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"child": 42}
    (kid,) = child_runs(handle)
    assert kid.workflow_name == "test-child" and kid.status == "completed"
    wait = StepAttempt.objects.get(workflow_run_id=handle.id, kind="workflow")
    assert wait.step_name == "test-child" and wait.child_workflow_run_id == kid.id and wait.output == 42
    assert handle.children() == [get_run(kid.id)] and get_run(kid.id).parent() == handle
    assert handle.parent() is None and get_run(kid.id).children() == []


def test_parent_wakes_as_soon_as_the_child_finishes(run_worker):
    # The parent waits up to a year; only the child's completion can wake it within the ceiling.
    handle = parent.run({"child": {"n": 1, "mode": "sleep", "duration": "300ms"}})
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    run = handle.fetch()
    (kid,) = child_runs(handle)
    assert kid.finished_at <= run.finished_at


def test_failed_child_raises_step_failed_in_the_parent(run_worker):
    handle = parent.run({"child": {"n": 1, "mode": "fail"}})
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    assert handle.result() == {"failed": "ChildWorkflowFailed", "child_error": "StepFailed"}


def test_canceled_child_fails_the_parent_step_promptly(run_worker):
    handle = parent.run({"child": {"n": 1, "mode": "sleep", "duration": "1h"}})
    run_worker(
        until=lambda: (
            child_runs(handle).filter(worker_id=None, status="running").exists() and handle.fetch().worker_id is None
        )
    )
    kid = child_runs(handle).get()
    assert get_run(kid.id).cancel() is True
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    assert handle.result()["failed"] == "ChildWorkflowFailed"


def test_timeout_fails_the_parent_step_but_the_child_keeps_running(run_worker):
    handle = parent.run({"child": {"n": 1, "mode": "sleep", "duration": "600ms"}, "timeout": "150ms"})
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    assert handle.result() == {"failed": "ChildWorkflowTimeout", "child_error": None}
    kid = child_runs(handle).get()
    assert kid.status == "running"
    run_worker(until=lambda: child_runs(handle).get().status == "completed", timeout=CEILING)


def test_child_by_name_with_custom_step_name(run_worker):
    handle = parent_by_name.run()
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == 2
    assert StepAttempt.objects.get(workflow_run_id=handle.id, kind="workflow").step_name == "kid"
