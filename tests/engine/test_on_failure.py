"""``@workflow(on_failure=...)``: a durable step once a run has failed for good, whatever failed it."""

from __future__ import annotations

import time

import pytest

from django_openworkflow import RetryPolicy, WorkflowRegistrationError, workflow
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.testing import drain
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import alerts_on_failure

pytestmark = pytest.mark.django_db(transaction=True)


def told(run_id) -> list[str]:
    """What on_failure recorded for the run, once per call."""
    return list(SideEffect.objects.filter(run_id=run_id, step__startswith="on-failure").values_list("step", flat=True))


def journal(run_id) -> list[tuple[str, str]]:
    return list(StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id").values_list("step_name", "status"))


def test_a_failed_run_calls_on_failure_once_in_a_real_worker(workers):
    handle = alerts_on_failure.run()
    proc = workers.start("--burst", "--poll", "50ms")
    assert proc.wait(60) == 0
    run = WorkflowRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.error["type"] == "StepFailed" and "on_failure_error" not in run.error
    assert told(handle.id) == ["on-failure StepFailed 1"]
    assert journal(handle.id) == [("boom", "failed"), ("on-failure", "completed")]


@pytest.mark.parametrize("nap", [None, "1h"], ids=["claimed past its deadline", "sleeps past its deadline"])
def test_a_run_failed_by_its_deadline_still_calls_on_failure(nap):
    # Past the deadline no step may start, but on_failure's one step does.
    handle = alerts_on_failure.run({"nap": nap}, deadline_at="30m" if nap else "1ms")
    time.sleep(0.01)
    drain()
    run = WorkflowRun.objects.get(id=handle.id)
    assert (run.status, run.error["type"]) == ("failed", "DeadlineExceeded")
    assert told(handle.id) == ["on-failure DeadlineExceeded 1"]


def test_a_run_failed_by_the_step_cap_still_calls_on_failure(settings):
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "MAX_STEP_ATTEMPTS": 1}
    handle = alerts_on_failure.run({"nap": "1s"})  # the sleep takes the one attempt; "boom" would pass the cap
    drain()
    run = WorkflowRun.objects.get(id=handle.id)
    assert (run.status, run.error["type"]) == ("failed", "StepLimitExceeded")
    assert told(handle.id) == ["on-failure StepLimitExceeded 1"]


def test_an_on_failure_that_keeps_failing_is_retried_then_recorded_and_the_run_fails():
    handle = alerts_on_failure.run({"alert_fails": True})
    drain()  # skips the retries' backoff
    run = WorkflowRun.objects.get(id=handle.id)
    assert run.status == "failed" and run.error["type"] == "StepFailed"  # the run's own error stays
    assert run.error["on_failure_error"]["message"] == "the pager is down"
    assert len(told(handle.id)) == 10  # retried as compensations are (10 attempts)


def test_an_on_failure_that_keeps_failing_past_the_deadline_is_retried_too():
    # Its retries' backoff ends past the deadline: they must not fail the run a second time, from inside on_failure.
    handle = alerts_on_failure.run({"alert_fails": True}, deadline_at="1ms")
    time.sleep(0.01)
    drain()
    run = WorkflowRun.objects.get(id=handle.id)
    assert (run.status, run.error["type"]) == ("failed", "DeadlineExceeded")
    assert run.error["on_failure_error"]["message"] == "the pager is down"
    assert len(told(handle.id)) == 10


def test_a_run_that_completes_or_is_retried_does_not_call_on_failure():
    calls: list[str] = []
    tries: list[int] = []  # this thread's only: drain() runs the slices here

    @workflow(
        name="test-on-failure-retried",
        retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="10ms"),
        on_failure=lambda failure: calls.append(failure.error["message"]),
    )
    def retried(ctx):
        tries.append(1)
        if len(tries) == 1:
            raise ValueError("the first attempt fails")
        return "done"

    handle = retried.run()
    drain()
    assert len(tries) == 2 and handle.status() == "completed"
    assert calls == []  # the first attempt's failure was retried, not final


def test_on_failure_must_be_callable():
    with pytest.raises(WorkflowRegistrationError, match="on_failure must be a callable, got 'mail me'"):
        workflow(name="test-on-failure-bad", on_failure="mail me")(lambda ctx: None)


def test_the_journal_shows_on_failure_after_the_compensations():
    @workflow(name="test-on-failure-compensated", step_retry_policy=RetryPolicy(maximum_attempts=1), on_failure=print)
    def compensated(ctx):
        ctx.step.run("reserve", lambda: "held", compensate=lambda held: None)
        ctx.step.run("charge", lambda: 1 / 0)

    handle = compensated.run()
    drain()
    wait_until(lambda: handle.status() == "failed", timeout=CEILING)
    assert [name for name, _ in journal(handle.id)] == ["reserve", "charge", "compensate:reserve", "on-failure"]
