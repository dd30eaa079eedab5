"""Run-level operations used by the admin and the command line."""

from __future__ import annotations

import pytest
from django.db.models import Count

from django_openworkflow.models import StepAttempt
from django_openworkflow.store import get_backend
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import always_fails, fails_at_three, sleeper, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_wake_run_makes_a_parked_run_due(run_worker):
    handle = sleeper.run({"duration": "1h"})
    run_worker()
    assert handle.fetch().worker_id is None and handle.status() == "running"
    assert get_backend().wake_run(handle.id) is True
    assert get_backend().wake_run(handle.id) is False  # already due
    run_worker(until=lambda: handle.status() == "completed")
    assert SideEffect.objects.filter(run_id=handle.id, step="after").count() == 1


def test_wake_run_refuses_finished_runs(run_worker):
    handle = three_steps.run()
    run_worker()
    assert get_backend().wake_run(handle.id) is False


def test_retry_failed_run_reruns_the_failed_step_and_keeps_completed_ones(run_worker):
    handle = always_fails.run()
    run_worker()
    assert handle.status() == "failed"
    assert get_backend().retry_failed_run(handle.id) is True
    assert get_backend().retry_failed_run(handle.id) is False  # now pending
    run = handle.fetch()
    assert run.status == "pending" and run.error is None and run.finished_at is None
    run_worker()
    # The step was attempted again with a fresh budget (and failed again).
    assert SideEffect.objects.filter(run_id=handle.id, step="boom").count() == 2
    assert StepAttempt.objects.filter(workflow_run_id=handle.id, status="failed").count() == 2
    assert handle.status() == "failed"


def test_retry_failed_run_refuses_other_states():
    handle = three_steps.run()
    assert get_backend().retry_failed_run(handle.id) is False


def test_cancel_closes_open_sleeps_and_wakes_nothing_more(run_worker):
    handle = sleeper.run({"duration": "1h"})
    run_worker()
    assert get_backend().cancel_run(handle.id) is True
    nap = StepAttempt.objects.get(workflow_run_id=handle.id, kind="sleep")
    assert nap.status == "failed" and nap.error["type"] == "Canceled" and nap.finished_at is not None


def test_cancel_runs_in_bulk_counts_only_unfinished_ones(run_worker):
    done = three_steps.run({})
    run_worker()
    pending = [three_steps.run({}) for _ in range(3)]
    assert sorted(get_backend().cancel_runs([done.id, *(h.id for h in pending)])) == sorted(h.id for h in pending)
    assert {h.status() for h in pending} == {"canceled"} and done.status() == "completed"


def test_retry_from_the_failed_step_keeps_the_steps_before_it(run_worker):
    handle = fails_at_three.run()
    run_worker()
    assert handle.status() == "failed"
    before = dict(
        StepAttempt.objects.filter(workflow_run_id=handle.id, status="completed").values_list("step_name", "output")
    )
    assert before == {"one": 1, "two": 2}
    assert get_backend().retry_failed_run(handle.id) is True
    run_worker()
    assert handle.result() == 3
    effects = dict(SideEffect.objects.filter(run_id=handle.id).values_list("step").annotate(n=Count("id")))
    assert effects == {"one": 1, "two": 1, "three": 2}  # one and two did not run again
    after = StepAttempt.objects.filter(workflow_run_id=handle.id, status="completed", step_name__in=["one", "two"])
    assert dict(after.values_list("step_name", "output")) == before


# -- a transaction the database aborted over locks is tried again --


@pytest.mark.django_db(transaction=True)
def test_retrying_runs_a_lock_victim_again_but_not_inside_the_callers_transaction():
    from django.db import IntegrityError, OperationalError, transaction

    from django_openworkflow.store import get_backend

    store = get_backend()
    calls: list[int] = []

    def deadlocked_once() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("(1213, 'Deadlock found when trying to get lock; try restarting transaction')")
        return "done"

    assert store.retrying(deadlocked_once) == "done" and len(calls) == 2
    calls.clear()
    with pytest.raises(OperationalError), transaction.atomic(using=store.alias):  # aborted as a whole
        store.retrying(deadlocked_once)
    assert len(calls) == 1

    def not_about_locks() -> None:
        calls.append(1)
        raise IntegrityError("duplicate key")

    calls.clear()
    with pytest.raises(IntegrityError):
        store.retrying(not_about_locks)
    assert len(calls) == 1
