"""A short chaos run: workers are SIGKILLed and SIGSTOPped past their lease while runs execute.

The full version, with a database restart and figures, is bench/chaos.py.
"""

from __future__ import annotations

import random
import signal
import time

import pytest
from django.db.models import Count

from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import chaos_5

pytestmark = pytest.mark.django_db(transaction=True)
WORKER_ARGS = ("--concurrency", "4", "--lease", "1s", "--poll", "20ms")
RUNS = 80


def test_nothing_is_lost_or_completed_twice_under_kills_and_stops(workers):
    rng = random.Random(7)
    handles = [chaos_5.run({"i": i, "pause": 0.1}) for i in range(RUNS)]
    live = [workers.start(*WORKER_ARGS) for _ in range(2)]
    kills = stops = faults_on_runs_in_flight = 0
    chaos_until = time.monotonic() + 6
    while time.monotonic() < chaos_until:
        time.sleep(rng.uniform(0.3, 0.8))
        victim = live.pop(rng.randrange(len(live)))
        faults_on_runs_in_flight += WorkflowRun.objects.exclude(status="completed").exists()
        if rng.random() < 0.3:
            # A zombie: paused past its lease, then resumed after others took over.
            victim.send_signal(signal.SIGSTOP)
            time.sleep(1.5)
            victim.send_signal(signal.SIGCONT)
            stops += 1
        else:
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            kills += 1
        live.append(workers.start(*WORKER_ARGS))

    def all_completed() -> bool:
        # A worker that could not renew its 1 s leases in time stops itself, as designed, on a busy machine;
        # its process manager would start another: so does this loop, or the runs would wait for nobody.
        for index, proc in enumerate(live):
            if proc.poll() is not None:
                live[index] = workers.start(*WORKER_ARGS)
        return WorkflowRun.objects.filter(status="completed").count() == RUNS

    wait_until(all_completed, timeout=CEILING)  # over 90 s at a load of 28, workers stopping themselves

    assert kills + stops >= 5
    assert faults_on_runs_in_flight >= 3, "the faults must hit runs in flight"
    assert WorkflowRun.objects.count() == RUNS  # nothing lost
    assert [h.result() for h in handles] == [15] * RUNS
    duplicate_completions = (
        StepAttempt.objects.filter(status="completed")
        .values("workflow_run_id", "step_name")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    assert duplicate_completions == 0
    # Every step's side effect happened at least once per run.
    effects = SideEffect.objects.values("run_id", "step").annotate(n=Count("id"))
    assert len(effects) == RUNS * 5
