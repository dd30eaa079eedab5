"""Retries, deadlines, cancel, determinism and limits."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_openworkflow import RetryAfter, RetryPolicy, workflow
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import CEILING, is_parked, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import record, sleeper, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
flaky_failures: dict[str, int] = {}


def fail_first(ctx, step, times, exc_factory=lambda: RuntimeError("flaky")):
    record(ctx, step)
    if SideEffect.objects.filter(run_id=ctx.run_id, step=step).count() <= times:
        raise exc_factory()
    return step


@workflow(name="test-flaky-step")
def flaky_step(ctx):
    policy = RetryPolicy(initial_interval="50ms", maximum_attempts=3)
    return ctx.step.run("flaky", lambda: fail_first(ctx, "flaky", ctx.input["fail"]), retry_policy=policy)


@workflow(name="test-retry-after")
def retry_after(ctx):
    return ctx.step.run("limited", lambda: fail_first(ctx, "limited", 1, lambda: RetryAfter("300ms")))


@workflow(
    name="test-workflow-retry",
    retry_policy=RetryPolicy(initial_interval="20ms", maximum_attempts=2),
    step_retry_policy=RetryPolicy(maximum_attempts=1),
)
def workflow_retry(ctx):
    first = ctx.step.run("stable", lambda: record(ctx, "stable") or "kept")
    second = ctx.step.run("fails-once", lambda: fail_first(ctx, "fails-once", 1))
    return [first, second]


@workflow(name="test-outside-error", retry_policy=RetryPolicy(initial_interval="20ms", maximum_attempts=3))
def outside_error(ctx):
    ctx.step.run("count", lambda: record(ctx, "count"))
    record(ctx, "body")
    if SideEffect.objects.filter(run_id=ctx.run_id, step="body").count() < 3:
        raise KeyError("not yet")
    return "third time"


@workflow(name="test-many-steps")
def many_steps(ctx):
    for i in range(ctx.input["steps"]):
        ctx.step.run(f"s{i}", lambda: i)
    return "done"


@workflow(name="test-slow-then-more")
def slow_then_more(ctx):
    ctx.step.run("slow", lambda: outlive_the_deadline(ctx.run_id))
    ctx.step.run("after", lambda: record(ctx, "after"))


def outlive_the_deadline(run_id) -> None:
    """Return once the worker's clock has passed the run's deadline, however slow the machine.

    The worker's clock is the claim's database timestamp plus the time since the claim returned:
    behind the database's by at most how long the claim took, itself less than the time from the
    run's creation to this step. Past the deadline by that much, the worker's clock is past it too.
    """
    run = WorkflowRun.objects.get(id=run_id)
    lag = timezone.now() - run.created_at
    wait_until(lambda: timezone.now() > run.deadline_at + lag, timeout=CEILING)


seen_inside_the_step: list[bool] = []


@workflow(name="test-cancel-aware")
def cancel_aware(ctx):
    def check():
        seen_inside_the_step.append(ctx.is_canceled())  # before the cancel
        WorkflowRun.objects.filter(id=ctx.run_id).update(status="canceled")
        seen_inside_the_step.append(ctx.is_canceled())  # after it
        return seen_inside_the_step[-1]

    return ctx.step.run("check", check)


def claim_one():
    (claimed,) = get_backend().claim("w", 1, LEASE)
    return claimed


def test_retry_policy_backoff_arithmetic():
    policy = RetryPolicy()
    assert [policy.delay_after(n).total_seconds() for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 64, 100, 100]
    assert policy.allows_another(9) and not policy.allows_another(10)
    assert RetryPolicy(maximum_attempts=0).allows_another(10**6)
    assert RetryPolicy(backoff_coefficient=1e9).delay_after(500) == timedelta(seconds=100)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"initial_interval": 0}, "initial_interval must be positive"),
        ({"initial_interval": "-1s"}, "invalid duration '-1s'"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient must be >= 1"),
        ({"maximum_attempts": -1}, "maximum_attempts"),
        ({"maximum_interval": "1ms"}, "shorter than"),
    ],
)
def test_bad_retry_policy_is_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)


def test_failed_step_parks_the_run_then_retries_it(run_worker):
    handle = flaky_step.run({"fail": 2})
    assert execute_slice(get_backend(), claim_one()).outcome == Outcome.PARKED
    run = handle.fetch()
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id)
    assert run.worker_id is None and run.status == "running"
    assert timedelta(milliseconds=40) <= run.available_at - attempt.finished_at <= timedelta(milliseconds=60)
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == "flaky"
    assert list(StepAttempt.objects.filter(workflow_run_id=handle.id).values_list("status", flat=True)) == [
        "failed",
        "failed",
        "completed",
    ]


def test_spent_budget_fails_the_run_naming_the_step(run_worker):
    handle = flaky_step.run({"fail": 5})
    run_worker(until=lambda: handle.status() == "failed")
    run = handle.fetch()
    assert run.error["step"] == "flaky" and "flaky" in run.error["message"]
    assert StepAttempt.objects.filter(workflow_run_id=handle.id, status="failed").count() == 3
    assert run.attempts == 1


def test_retry_after_waits_exactly_that_long():
    handle = retry_after.run()
    execute_slice(get_backend(), claim_one())
    run = handle.fetch()
    attempt = StepAttempt.objects.get(workflow_run_id=handle.id)
    assert attempt.error["type"] == "RetryAfter"
    assert timedelta(milliseconds=295) <= run.available_at - attempt.finished_at <= timedelta(milliseconds=310)


def test_workflow_retry_gives_failed_steps_a_fresh_budget_and_keeps_completed_ones(run_worker):
    handle = workflow_retry.run()
    run_worker(until=lambda: handle.status() in ("completed", "failed"))
    assert handle.result() == ["kept", "fails-once"]
    run = handle.fetch()
    assert run.attempts == 1 and run.error is None
    assert SideEffect.objects.filter(run_id=handle.id, step="stable").count() == 1


def test_error_outside_steps_is_retried_and_attempts_count_failures(run_worker):
    handle = outside_error.run()
    run_worker(until=lambda: handle.status() in ("completed", "failed"))
    assert handle.result() == "third time"
    assert handle.fetch().attempts == 2
    assert SideEffect.objects.filter(run_id=handle.id, step="count").count() == 1


def test_sleep_wake_up_is_not_a_workflow_attempt(run_worker):
    handle = sleeper.run({"duration": "50ms"})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.fetch().attempts == 0


def test_run_past_its_deadline_fails_when_claimed_even_if_unknown(run_worker):
    past = timezone.now() - timedelta(seconds=1)
    run = WorkflowRun.objects.create(workflow_name="not-registered", available_at=past, deadline_at=past)
    run_worker()
    run.refresh_from_db()
    assert run.status == "failed" and run.error["type"] == "DeadlineExceeded"


def test_sleep_past_the_deadline_fails_now(run_worker):
    handle = sleeper.run({"duration": "1h"}, deadline_at="30s")
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == "DeadlineExceeded" and run.error["step"] == "nap"


def test_retry_past_the_deadline_fails_now(run_worker):
    handle = retry_after.run(deadline_at="100ms")
    run_worker()
    assert handle.fetch().error["type"] == "DeadlineExceeded"


def test_deadline_is_checked_before_each_step(run_worker):
    # The run must be claimed before its deadline: a machine too busy to claim it within the
    # deadline fails it at the claim (no step named), so the deadline doubles until one is.
    deadline = timedelta(milliseconds=200)
    while True:
        handle = slow_then_more.run(deadline_at=timezone.now() + deadline)
        run_worker()
        run = handle.fetch()
        assert run.status == "failed" and run.error["type"] == "DeadlineExceeded"
        if "step" in run.error or deadline > timedelta(seconds=CEILING):
            break
        deadline *= 2
    assert run.error["step"] == "after"
    assert not SideEffect.objects.filter(run_id=handle.id).exists()


def test_cancel_parked_run_is_never_resumed(run_worker):
    # Long enough to be seen parked on a busy machine (50 ms could end unseen); the
    # second worker starts once the sleep is due, when a run that was not canceled resumes.
    handle = sleeper.run({"duration": "1s"})
    run_worker(until=lambda: is_parked(handle))
    due = handle.fetch().available_at
    assert handle.cancel() is True
    wait_until(lambda: get_backend().now() > due, timeout=CEILING)
    run_worker()
    assert handle.status() == "canceled"
    assert not SideEffect.objects.filter(run_id=handle.id, step="after").exists()


def test_is_canceled_is_visible_inside_a_step():
    seen_inside_the_step.clear()
    handle = cancel_aware.run()
    assert execute_slice(get_backend(), claim_one()).outcome == Outcome.LEASE_LOST
    assert seen_inside_the_step == [False, True]
    assert handle.status() == "canceled"


def test_replay_that_changed_a_step_kind_is_a_determinism_error(run_worker):
    handle = three_steps.run()
    now = timezone.now()
    WorkflowRun.objects.filter(id=handle.id).update(started_at=now)  # as if a worker had run it before
    StepAttempt.objects.create(
        workflow_run_id=handle.id, step_name="one", kind="sleep", status="completed", started_at=now
    )
    run_worker()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == "DeterminismError"
    assert "'one'" in run.error["message"] and "'sleep'" in run.error["message"] and "'run'" in run.error["message"]


@override_settings(OPENWORKFLOW={"MAX_STEP_ATTEMPTS": 3, "POLL_INTERVAL": "20ms"})
def test_step_attempt_cap_fails_the_run_without_retry(run_worker):
    handle = many_steps.run({"steps": 5})
    run_worker()
    run = handle.fetch()
    assert run.status == "failed" and run.error["type"] == "StepLimitExceeded"
    assert StepAttempt.objects.filter(workflow_run_id=handle.id).count() == 3
