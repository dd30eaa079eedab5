"""Every write for a run is conditional on the worker still holding it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_openworkflow import workflow
from django_openworkflow.conf import owf_settings
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.store.records import Fence, LeaseLost
from tests.fixtures.testapp.workflows import record

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
during_step: list = []


@workflow(name="test-takeover")
def takeover(ctx):
    def one():
        record(ctx, "one")
        if during_step:
            during_step.pop()()
        return 1

    a = ctx.step.run("one", one)
    b = ctx.step.run("two", lambda: a + 1)
    return b


def expire_and_claim_by(worker_id):
    WorkflowRun.objects.update(available_at=timezone.now() - timedelta(seconds=1))
    (claimed,) = get_backend().claim(worker_id, 10, LEASE)
    return claimed


def test_worker_that_lost_its_lease_writes_nothing_more():
    handle = takeover.run()
    (claimed_a,) = get_backend().claim("worker-a", 10, LEASE)
    stolen = []
    during_step.append(lambda: stolen.append(expire_and_claim_by("worker-b")))

    result = execute_slice(get_backend(), claimed_a)

    assert result.outcome == Outcome.LEASE_LOST
    run = handle.fetch()
    assert run.worker_id == "worker-b" and run.status == "running" and run.output is None
    # A's completion of step one (and start of step two) never landed.
    assert not StepAttempt.objects.exists()

    # B charges A's death to the step A was in, then runs it again.
    result_b = execute_slice(get_backend(), stolen[0])
    assert result_b.outcome == Outcome.COMPLETED
    assert handle.result() == 2
    assert list(StepAttempt.objects.order_by("id").values_list("step_name", "status")) == [
        ("one", "failed"),
        ("one", "completed"),
        ("two", "completed"),
    ]


def test_stale_worker_cannot_finish_the_run():
    handle = takeover.run()
    (claimed_a,) = get_backend().claim("worker-a", 10, LEASE)
    expire_and_claim_by("worker-b")
    with pytest.raises(LeaseLost):
        get_backend().complete_run(Fence(handle.id, "worker-a", timezone.now()), "stale", None)
    run = handle.fetch()
    assert run.status == "running" and run.output is None and run.worker_id == "worker-b"
    assert execute_slice(get_backend(), claimed_a).outcome == Outcome.LEASE_LOST
    assert StepAttempt.objects.count() == 0


def test_cancel_during_a_step_stops_the_worker_and_stays_canceled():
    handle = takeover.run()
    (claimed,) = get_backend().claim("worker-a", 10, LEASE)
    during_step.append(handle.cancel)
    assert execute_slice(get_backend(), claimed).outcome == Outcome.LEASE_LOST
    run = handle.fetch()
    assert run.status == "canceled" and run.output is None
    assert not StepAttempt.objects.exists()


def test_heartbeat_extends_only_held_runs():
    held, other = takeover.run(), takeover.run()
    claimed = get_backend().claim("worker-a", 1, timedelta(seconds=2))
    assert [c.run.id for c in claimed] in ([held.id], [other.id])
    mine = claimed[0].run.id
    before = WorkflowRun.objects.get(id=mine).available_at
    assert get_backend().extend_leases("worker-a", timedelta(seconds=60), [mine]) == 1
    assert WorkflowRun.objects.get(id=mine).available_at > before + timedelta(seconds=50)
    assert get_backend().extend_leases("worker-b", timedelta(seconds=60), [mine]) == 0


def test_claim_takes_due_runs_oldest_first_in_one_batch():
    handles = [takeover.run() for _ in range(5)]
    claimed = get_backend().claim("worker-a", 3, LEASE)
    assert [c.run.id for c in claimed] == [h.id for h in handles[:3]]
    assert get_backend().claim("worker-b", 10, LEASE)[0].run.id == handles[3].id
    assert WorkflowRun.objects.filter(worker_id="worker-a").count() == 3


def test_the_engine_reads_and_writes_through_the_store_it_is_given():
    # A second backend of the workflow alias that notes what it is asked: the slice must
    # use it, not look up the shared one (get_backend()).
    class Noting(type(get_backend())):  # type: ignore[misc]
        def __init__(self, alias):
            super().__init__(alias)
            self.calls = []

        def load_history(self, run_id):
            self.calls.append("load_history")
            return super().load_history(run_id)

        def complete_run(self, fence, *args, **options):
            self.calls.append("complete_run")
            return super().complete_run(fence, *args, **options)

    handle = takeover.run()
    store = Noting(owf_settings.database)
    (claimed,) = store.claim("worker-a", 10, LEASE)
    assert execute_slice(store, claimed).outcome == Outcome.COMPLETED
    assert handle.result() == 2
    # A fresh run has no history to load; its end is written through the store given.
    assert store.calls == ["complete_run"]
