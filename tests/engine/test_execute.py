"""The replay engine, executed in-process by a real Worker on the test database."""

from __future__ import annotations

import time

import pytest

from django_openworkflow import PayloadError, StepFailed, workflow
from django_openworkflow.models import RunStatus, StepAttempt, WorkflowRun
from tests.conftest import is_parked
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import always_fails, bad_output, non_retryable, sleeper, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

calls: list[str] = []


@workflow(name="test-collisions")
def collisions(ctx):
    keys = []
    for label in ("foo", "foo:1", "foo", "foo"):
        keys.append(ctx.step.run(label, lambda label=label: label))
    ctx.step.sleep("foo", 0)
    return keys


@workflow(name="test-nested")
def nested(ctx):
    return ctx.step.run("outer", lambda: ctx.step.run("inner", lambda: 1))


@workflow(name="test-catch-step-failed")
def catch_step_failed(ctx):
    def boom():
        calls.append("boom")
        raise RuntimeError("no")

    try:
        ctx.step.run("boom", boom, retry_policy=__import__("django_openworkflow").RetryPolicy(maximum_attempts=1))
    except StepFailed as exc:
        return {"caught": exc.step_name}


@workflow(name="test-swallow")
def swallow(ctx):
    try:
        ctx.step.sleep("nap", "1h")
    except Exception:  # must not catch the engine's suspension
        return "swallowed"
    return "woke"


@workflow(name="test-bad-sleep")
def bad_sleep(ctx):
    ctx.step.sleep("nap", "soon")


@workflow(name="test-returns-set")
def returns_set(ctx):
    return {1, 2}


@workflow(name="test-json-roundtrip")
def json_roundtrip(ctx):
    value = ctx.step.run("tuple", lambda: (1, "a"))
    return {"value": value, "type": type(value).__name__}


def journal(handle):
    return list(
        StepAttempt.objects.filter(workflow_run_id=handle.id).order_by("id").values_list("step_name", "kind", "status")
    )


def test_completed_steps_are_not_rerun_on_replay(run_worker):
    handle = three_steps.run({"start": 3})
    run_worker()
    assert handle.result() == {"result": 31}
    assert journal(handle) == [("one", "run", "completed"), ("two", "run", "completed"), ("three", "run", "completed")]
    # Replaying a finished run from the top (as a new owner would) calls no step function again.
    WorkflowRun.objects.filter(id=handle.id).update(
        status=RunStatus.RUNNING, worker_id=None, available_at="2000-01-01T00:00:00Z"
    )
    run_worker()
    assert SideEffect.objects.filter(run_id=handle.id).count() == 3
    assert handle.result() == {"result": 31}


def test_duplicate_names_are_auto_indexed_skipping_used_keys(run_worker):
    handle = collisions.run()
    run_worker()
    assert handle.result() == ["foo", "foo:1", "foo", "foo"]
    assert [key for key, _, _ in journal(handle)] == ["foo", "foo:1", "foo:2", "foo:3", "foo:4"]


def test_sleep_parks_the_run_and_frees_the_worker(run_worker):
    handle = sleeper.run({"duration": "400ms"})
    run_worker(
        until=lambda: (
            WorkflowRun.objects.filter(id=handle.id, worker_id=None, status="running").exists()
            and StepAttempt.objects.filter(workflow_run_id=handle.id, kind="sleep").exists()
        )
    )
    run = handle.fetch()
    assert run.status == "running" and run.worker_id is None
    assert run.available_at > run.started_at
    assert journal(handle) == [("before", "run", "completed"), ("nap", "sleep", "running")]
    run_worker(until=lambda: handle.status() == "completed")
    assert journal(handle)[-2:] == [("nap", "sleep", "completed"), ("after", "run", "completed")]
    assert SideEffect.objects.filter(run_id=handle.id, step="before").count() == 1


def test_step_error_is_recorded_and_fails_the_run(run_worker):
    handle = always_fails.run()
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == "StepFailed"
    assert run.error["step"] == "boom"
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id)
    assert attempt.status == "failed"
    assert attempt.error["type"] == "ValueError" and attempt.error["message"] == "kaboom"
    assert "Traceback" in attempt.error["traceback"] and "kaboom" in attempt.error["traceback"]


def test_non_retryable_error_fails_at_once(run_worker):
    handle = non_retryable.run()
    run_worker()
    assert handle.status() == "failed"
    assert SideEffect.objects.filter(run_id=handle.id).count() == 1


def test_step_output_that_is_not_json_fails_the_step_naming_it(run_worker):
    handle = bad_output.run()
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id)
    assert attempt.status == "failed"
    assert "output of step 'make'" in attempt.error["message"]
    assert "object" in attempt.error["message"]


def test_workflow_output_that_is_not_json_fails_the_run(run_worker):
    handle = returns_set.run()
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == "PayloadError"
    assert "output of workflow 'test-returns-set'" in run.error["message"]


def test_step_values_read_back_as_json_on_first_run_too(run_worker):
    handle = json_roundtrip.run()
    run_worker()
    assert handle.result() == {"value": [1, "a"], "type": "list"}


def test_nested_step_is_a_clear_error(run_worker):
    handle = nested.run()
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="outer")
    assert attempt.error["type"] == "StepUsageError"
    assert "inside step 'outer'" in attempt.error["message"]
    assert attempt.error["retryable"] is False


def test_user_code_can_catch_step_failed(run_worker):
    calls.clear()
    handle = catch_step_failed.run()
    run_worker()
    assert handle.result() == {"caught": "boom"}
    assert calls == ["boom"]


def test_except_exception_does_not_swallow_suspension(run_worker):
    handle = swallow.run()
    run_worker(until=lambda: is_parked(handle))
    assert handle.status() == "running"


def test_bad_sleep_duration_fails_the_run_with_value_error(run_worker):
    handle = bad_sleep.run()
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == "ValueError" and "'soon'" in run.error["message"]


def test_unknown_workflow_is_rescheduled_not_failed(run_worker, caplog):
    run = WorkflowRun.objects.create(workflow_name="nobody-has-this", version="v9", available_at="2000-01-01T00:00:00Z")
    before = time.time()
    with caplog.at_level("WARNING", logger="django_openworkflow.engine"):
        run_worker()
    run.refresh_from_db()
    assert run.status == "running" and run.worker_id is None
    assert run.error["type"] == "UnknownWorkflow" and run.error["reschedules"] == 1
    assert 4 <= run.available_at.timestamp() - before <= 7
    assert "nobody-has-this" in caplog.text and "v9" in caplog.text
    # The next unknown claim doubles the backoff.
    WorkflowRun.objects.filter(id=run.id).update(available_at="2000-01-01T00:00:00Z")
    before = time.time()
    run_worker()
    run.refresh_from_db()
    assert run.error["reschedules"] == 2
    assert 9 <= run.available_at.timestamp() - before <= 12


def test_a_stale_unknown_workflow_note_is_cleared_when_the_run_executes_again(run_worker):
    # A worker without the code left the note; one with it parks the run in a sleep.
    handle = sleeper.run({"duration": "1h"})
    note = {"type": "UnknownWorkflow", "message": "this worker has no workflow 'sleeper'", "reschedules": 3}
    WorkflowRun.objects.filter(id=handle.id).update(error=note)
    run_worker()
    run = handle.fetch()
    assert (run.status, run.worker_id, run.error) == ("running", None, None)


def test_input_that_is_not_json_raises_before_anything_is_written():
    with pytest.raises(PayloadError, match="input of workflow 'three-steps'"):
        three_steps.run({"when": object()})
    with pytest.raises(PayloadError, match="NaN"):
        three_steps.run({"x": float("nan")})
    assert WorkflowRun.objects.count() == 0


@workflow(name="test-secret-local")
def secret_local(ctx):
    def boom():
        api_key = "sk-live-very-secret"  # noqa: F841 - a local that must not reach the journal
        raise RuntimeError("upstream refused")

    ctx.step.run("call", boom, retry_policy=__import__("django_openworkflow").RetryPolicy(maximum_attempts=1))


def test_tracebacks_never_include_local_values(run_worker):
    handle = secret_local.run()
    run_worker()
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id)
    assert "upstream refused" in attempt.error["traceback"]
    assert "sk-live-very-secret" not in str(attempt.error) and "sk-live-very-secret" not in str(handle.fetch().error)
