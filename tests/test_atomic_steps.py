"""ctx.step.run(..., atomic=True): a step's database writes commit with its journal entry, exactly once."""

from __future__ import annotations

import signal

import pytest

from django_openworkflow import RetryPolicy, workflow
from django_openworkflow.models import StepAttempt
from tests.conftest import wait_until
from tests.testapp.models import SideEffect
from tests.testapp.workflows import atomic_write, record

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
    assert handle.result(timeout=30) == "written"
    assert SideEffect.objects.filter(run_id=handle.id, step="write").count() == 1
