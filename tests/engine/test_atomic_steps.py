"""ctx.step.run(..., atomic=True): a step's database writes commit with its journal entry, exactly once."""

from __future__ import annotations

import signal

import pytest

from django_openworkflow import RetryPolicy, send_signal, workflow
from django_openworkflow.models import Signal, StepAttempt
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import approval, atomic_write, record

pytestmark = pytest.mark.django_db(transaction=True)
failures_left: list[int] = []


@workflow(name="test-atomic-fails-once", step_retry_policy=RetryPolicy(initial_interval="10ms", maximum_attempts=3))
def atomic_fails_once(ctx):
    def write():
        record(ctx, "write")
        if failures_left:
            failures_left.pop()
            raise RuntimeError("failed after writing")
        return "ok"

    before = ctx.step.run("before", lambda: "b")
    return [before, ctx.step.run("write", write, atomic=True)]


def test_failed_atomic_step_rolls_its_writes_back(run_worker):
    failures_left[:] = [1]
    handle = atomic_fails_once.run()
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == ["b", "ok"]
    # The failed attempt's row was rolled back with it: exactly one write survives.
    assert SideEffect.objects.filter(run_id=handle.id, step="write").count() == 1
    statuses = list(
        StepAttempt.objects.filter(workflow_run_id=handle.id, step_name="write").values_list("status", flat=True)
    )
    assert statuses == ["failed", "completed"]


def test_killed_worker_inside_an_atomic_step_leaves_no_write(workers, tmp_path):
    marker = tmp_path / "hung-once"
    handle = atomic_write.run({"hang_marker": str(marker)})
    first = workers.start("--lease", "1s", "--poll", "20ms")
    wait_until(marker.exists)
    assert not SideEffect.objects.filter(run_id=handle.id).exists()  # not committed yet
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    workers.start("--lease", "1s", "--poll", "20ms")
    assert handle.result(timeout=CEILING) == "written"
    assert SideEffect.objects.filter(run_id=handle.id, step="write").count() == 1


@workflow(name="test-atomic-signals-another-run")
def atomic_signals_another_run(ctx):
    # The step's own code calls back into the store (which takes the SQLite
    # write lock the atomic step already holds): the lock must be re-entrant.
    return ctx.step.run(
        "notify", lambda: send_signal(ctx.input["other"], "approval", "from an atomic step"), atomic=True
    )


def test_atomic_step_may_call_into_the_store(run_worker):
    other = approval.run({}, available_at="1h")  # stays pending: the signal is buffered
    handle = atomic_signals_another_run.run({"other": str(other.id)})
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    assert handle.result() is False  # buffered for the other run's wait
    assert Signal.objects.get().workflow_run_id == other.id
