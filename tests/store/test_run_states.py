"""Display states (store/run_states.py): what the engine leaves on a run decides retrying, waiting and parked."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow.client.handle import send_signal
from django_openworkflow.formatting import error_cell, retry_line, wait_line, workflow_attempts
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend, queries, run_states
from django_openworkflow.testing import drain
from tests.fixtures.testapp.workflows import always_fails, approval, fails_in_child, keeps_failing, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def make_due(handle: Any) -> None:
    """Skip the rest of a run's backoff: it is due now."""
    WorkflowRun.objects.filter(id=handle.id).update(available_at=timezone.now())


def state(handle: Any) -> run_states.RunState:
    return run_states.state_of(handle.fetch())


def test_a_step_in_its_retry_backoff_is_retrying_with_its_attempts_and_error() -> None:
    handle = keeps_failing.run()
    drain(skip_sleeps=False)
    run = handle.fetch()
    assert run.status == "running" and run.worker_id is None  # parked, as before
    assert run.error == {
        "type": "ValueError",
        "message": "card declined",
        "step": "charge",
        "retry": {"scope": "step", "failures": 1, "max_attempts": 10},
    }
    assert state(handle).status == "retrying" and handle.display_status() == "retrying"
    make_due(handle)
    drain(skip_sleeps=False)
    run = handle.fetch()
    assert run.error["retry"]["failures"] == 2
    line = retry_line(run.error, run.available_at, timezone.now())
    assert line.startswith("step 'charge' · attempt 2 of 10 failed · next in 59 m")
    assert line.endswith(" · last error ValueError: card declined")
    assert queries.status_counts()["retrying"] == 1 and queries.status_counts()["parked"] == 0
    assert [r.id for r in queries.list_runs(statuses=["retrying"])] == [handle.id]
    assert queries.list_runs(statuses=["parked"]) == [] and queries.list_runs(statuses=["waiting"]) == []


def test_the_note_is_dropped_once_the_run_executes_again() -> None:
    handle = keeps_failing.run({"until_attempt": 2})
    drain(skip_sleeps=False)
    assert state(handle).status == "retrying"
    make_due(handle)
    drain(skip_sleeps=False)  # the step succeeds, then the run sleeps for an hour
    run = handle.fetch()
    assert run.error is None and state(handle).status == "parked"
    assert queries.status_counts()["parked"] == 1


def test_a_workflow_retry_is_retrying_too() -> None:
    from django_openworkflow import RetryPolicy, workflow

    policy = RetryPolicy("1h", maximum_interval="1h", maximum_attempts=3)

    @workflow(name="test-states-workflow-retry", retry_policy=policy)
    def body_fails(ctx: Any) -> None:
        raise KeyError("missing")

    handle = body_fails.run()
    drain(skip_sleeps=False)
    run = handle.fetch()
    assert run.error["retry"] == {"scope": "workflow", "failures": 1, "max_attempts": 3}
    assert state(handle).status == "retrying" and run.attempts == 1
    assert retry_line(run.error, run.available_at, timezone.now()).startswith(
        "the workflow · attempt 1 of 3 failed · next in "
    )


def test_a_run_waiting_for_a_signal_is_waiting_and_says_for_what() -> None:
    handle = approval.run({"timeout": "2h"})
    drain(skip_sleeps=False)
    current = state(handle)
    assert current.status == "waiting" and current.wait is not None
    assert wait_line(current.wait, timezone.now()).startswith("waiting for signal 'approval' · times out in 1 h 59 m")
    assert queries.status_counts()["waiting"] == 1
    assert [r.id for r in queries.list_runs(statuses=["waiting"])] == [handle.id]
    assert handle.status() == "running"  # the stored status, as before
    assert handle.display_status() == "waiting"
    send_signal(handle.id, "approval", {"ok": True})
    drain(skip_sleeps=False)
    assert state(handle).status == "completed"


def test_a_run_waiting_for_its_child_is_waiting_for_it() -> None:
    from django_openworkflow import workflow

    @workflow(name="test-states-parent")
    def parent(ctx: Any) -> Any:
        return ctx.step.run_workflow("approval", {})

    handle = parent.run()
    drain(skip_sleeps=False)
    current = state(handle)
    assert current.status == "waiting"
    child = current.wait.child_workflow_run_id
    assert wait_line(current.wait, timezone.now()).startswith(f"waiting for child run {str(child)[:8]} (approval)")


def test_workflow_attempts_add_up_over_a_retry_from_the_failed_step() -> None:
    done = three_steps.run()
    handle = always_fails.run()
    drain()
    assert done.fetch().attempts == 0 and workflow_attempts(done.fetch()) == 1
    assert handle.fetch().attempts == 1 and workflow_attempts(handle.fetch()) == 1
    assert get_backend().retry_failed_run(handle.id)
    assert handle.fetch().attempts == 1 and workflow_attempts(handle.fetch()) == 2  # the second, about to run
    drain()
    run = handle.fetch()
    assert run.status == "failed" and run.attempts == 2 and workflow_attempts(run) == 2  # two failures, not three
    assert run.step_attempts.filter(status="failed").count() == 2  # a fresh step budget on the second attempt


def test_a_parent_failed_by_its_child_carries_the_childs_error() -> None:
    handle = fails_in_child.run()
    drain()
    error = handle.fetch().error
    child = WorkflowRun.objects.get(parent_step_attempt__workflow_run_id=handle.id)
    assert error["step"] == "always-fails" and error["child_run_id"] == str(child.id)
    assert error["child_error"]["type"] == "StepFailed"
    assert error["child_error"]["message"] == "step 'boom' failed: ValueError: kaboom"
    assert error["message"].endswith("failed: StepFailed: step 'boom' failed: ValueError: kaboom")
    assert error_cell(error) == ("ValueError: kaboom", "always-fails")
    listed = queries.list_runs(workflow_name="fails-in-child")[0]  # the list's annotated summary
    assert error_cell(run_states.error_summary(listed)) == ("ValueError: kaboom", "always-fails")
