"""Real `manage.py runworkflows` subprocesses: crashes, concurrency, signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from django.db.models import Count

from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING, ROOT, is_parked, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import kills_its_worker, sleeper, slow_steps, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_killed_worker_is_replaced_and_completed_steps_are_not_rerun(workers):
    handle = three_steps.run({"start": 4, "hang_first_time": True})
    first = workers.start("--lease", "1s", "--poll", "20ms")
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id, step="two").exists())
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    workers.start("--lease", "1s", "--poll", "20ms")
    assert handle.result(timeout=CEILING) == {"result": 41}
    effects = dict(SideEffect.objects.filter(run_id=handle.id).values_list("step").annotate(n=Count("id")))
    assert effects == {"one": 1, "two": 2, "three": 1}
    # The attempt the dead worker left open is closed as failed, then retried.
    assert list(
        StepAttempt.objects.filter(workflow_run_id=handle.id, step_name="two").values_list("status", flat=True)
    ) == ["failed", "completed"]
    assert (
        StepAttempt.objects.get(workflow_run_id=handle.id, step_name="two", status="failed").error["type"]
        == "LeaseExpired"
    )


def test_two_workers_execute_every_step_exactly_once(workers):
    handles = [three_steps.run({"start": i}) for i in range(200)]
    workers.start("--concurrency", "8", "--poll", "10ms")
    workers.start("--concurrency", "8", "--poll", "10ms")
    wait_until(lambda: WorkflowRun.objects.filter(status="completed").count() == 200, timeout=CEILING)
    per_run_step = SideEffect.objects.values("run_id", "step").annotate(n=Count("id"))
    assert len(per_run_step) == 600
    assert {row["n"] for row in per_run_step} == {1}
    assert handles[7].result() == {"result": 71}
    # Both processes did work.
    assert WorkflowRun.objects.values("worker_id").distinct().count() == 2


def test_sleeping_runs_free_the_slot(run_worker):
    """Two hour-long sleeps on one slot: both are asleep at once, which a sleep holding its slot would forbid."""
    handles = [sleeper.run({"duration": "1h"}) for _ in range(2)]
    run_worker(until=lambda: all(is_parked(h) for h in handles), concurrency=1)
    assert [h.status() for h in handles] == ["running", "running"]


def test_sigterm_finishes_the_current_slice_then_exits_zero(workers):
    handle = slow_steps.run({"steps": 1, "pause": 1.5})
    proc = workers.start("--poll", "20ms")
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id).exists())
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    assert handle.status() == "completed"
    assert SideEffect.objects.filter(run_id=handle.id).count() == 1


def test_second_signal_exits_at_once(workers):
    handle = slow_steps.run({"steps": 1, "pause": 30})
    proc = workers.start("--poll", "20ms")
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id).exists())
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert proc.poll() is None  # still finishing the step
    proc.send_signal(signal.SIGINT)
    assert proc.wait(5) != 0
    assert handle.status() == "running"  # its lease will expire; nothing is lost


def test_burst_worker_exits_when_no_work_is_due(workers):
    handles = [three_steps.run({"start": i}) for i in range(5)]
    proc = workers.start("--burst", "--poll", "10ms")
    assert proc.wait(60) == 0
    assert [h.status() for h in handles] == ["completed"] * 5


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--lease", "soonish"], "argument --lease: invalid duration 'soonish'"),
        (["--drain-timeout", "99999y"], "argument --drain-timeout: duration '99999y' is longer than 1000 years"),
        (["--concurrency", "0"], "concurrency must be at least 1, got 0"),
    ],
)
def test_bad_arguments_exit_with_a_clear_error(args, says):
    done = subprocess.run(
        [sys.executable, "-m", "django", "runworkflows", "--settings=tests.settings", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode != 0
    assert says in done.stderr
    assert "Traceback" not in done.stderr


def test_step_that_kills_its_worker_every_time_uses_up_its_budget(workers):
    handle = kills_its_worker.run()
    deaths = 0
    while handle.status() not in ("completed", "failed"):
        proc = workers.start("--lease", "1s", "--poll", "20ms")
        while proc.poll() is None and handle.status() not in ("completed", "failed"):
            time.sleep(0.05)
        if proc.poll() is not None:
            deaths += 1
        assert deaths <= 3, "the crashing step was retried past its budget"
    run = handle.fetch()
    assert run.status == "failed" and run.error["step"] == "die"
    assert deaths == 2 and SideEffect.objects.filter(run_id=handle.id).count() == 2
    errors = [a.error["type"] for a in StepAttempt.objects.filter(workflow_run_id=handle.id).order_by("id")]
    assert errors == ["LeaseExpired", "LeaseExpired"]
