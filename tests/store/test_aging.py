"""Priority aging (store/aging.py): the sweep raises waiting runs' priority, and the real claim follows it.

Runs are made to have waited with ``advance()`` (their due times move back),
then one sweep (``age_priorities``) runs and the store's claim, the one the
workers use, says which run comes first. No timing: the order is the result.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_openworkflow.checks import check_priority_aging
from django_openworkflow.client.listing import run_json
from django_openworkflow.client.operations import rerun_many, retry_from_failed_step
from django_openworkflow.conf import owf_settings
from django_openworkflow.models import WorkflowRun
from django_openworkflow.states import RunStatus
from django_openworkflow.store import aging as store_aging
from django_openworkflow.store import get_backend
from django_openworkflow.testing import advance, override_openworkflow
from django_openworkflow.worker.aging import age_priorities
from tests.conftest import CEILING, wait_until
from tests.fixtures.flow_display_workflows import charge
from tests.fixtures.flowapp.workflows import ordered

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
AGING = {"every": "1m", "ceiling": 5}


def claim_first() -> WorkflowRun:
    (claimed,) = get_backend().claim("w", 1, LEASE, ("default",))
    return WorkflowRun.objects.get(id=claimed.run.id)


def test_a_low_run_behind_a_flood_is_claimed_once_aged_to_the_ceiling_and_not_without_aging():
    low = ordered.run({"n": 0}).id
    flood = [ordered.run({"n": i}, priority=5).id for i in range(1, 6)]
    advance("10m")  # ten intervals: the low run reaches the ceiling, where it is the oldest
    with override_openworkflow(PRIORITY_AGING=None):
        assert age_priorities() == 0  # off: nothing changes
    assert WorkflowRun.objects.get(id=low).priority == 0
    with override_openworkflow(PRIORITY_AGING=AGING):
        assert age_priorities() == 1  # the flood is at the ceiling already
        assert claim_first().id == low
    # Without aging the same queue claims the whole flood first.
    WorkflowRun.objects.all().delete()
    low = ordered.run({"n": 0}).id
    flood = [ordered.run({"n": i}, priority=5).id for i in range(1, 6)]
    advance("10m")
    assert [claim_first().id for _ in flood] == flood
    assert claim_first().id == low


@override_openworkflow(PRIORITY_AGING={"every": "1m", "ceiling": 10})
def test_a_run_gains_one_level_per_interval_waited_up_to_the_ceiling_and_shows_both():
    low = ordered.run({"n": 0}, priority=-2).id
    above = ordered.run({"n": 1}, priority=20).id  # above the ceiling: never changed
    advance("3m30s")
    age_priorities()
    run = WorkflowRun.objects.get(id=low)
    assert (run.priority, run.declared_priority) == (1, -2)
    assert run_json(run)["priority"] == 1 and run_json(run)["declared_priority"] == -2
    assert WorkflowRun.objects.get(id=above).declared_priority is None
    advance("1h")
    age_priorities()
    run = WorkflowRun.objects.get(id=low)
    assert (run.priority, run.declared_priority) == (10, -2)
    assert WorkflowRun.objects.get(id=above).priority == 20


@override_openworkflow(PRIORITY_AGING=AGING)
def test_a_claimed_run_gives_its_levels_back_so_the_next_wait_starts_from_the_declaration():
    run_id = ordered.run({"n": 0}).id
    advance("3m")
    age_priorities()
    assert claim_first().priority == 3
    age_priorities()  # held by a worker: not waiting
    run = WorkflowRun.objects.get(id=run_id)
    assert (run.priority, run.declared_priority) == (0, None)


@override_openworkflow(PRIORITY_AGING=AGING)
def test_a_woken_run_ages_from_its_declaration_over_its_new_wait_only():
    run_id = ordered.run({"n": 0}, priority=1).id
    advance("4m")
    age_priorities()
    # Parked and woken (a sleep's end) while the sweep had not seen it: it still has the old wait's levels.
    WorkflowRun.objects.filter(id=run_id).update(
        status=RunStatus.RUNNING, available_at=get_backend().now() - timedelta(minutes=1)
    )
    age_priorities()
    run = WorkflowRun.objects.get(id=run_id)
    assert (run.priority, run.declared_priority) == (2, 1)  # one interval of the new wait, not 4 + 1


@override_openworkflow(PRIORITY_AGING=AGING)
def test_a_retry_and_a_rerun_start_from_the_declared_priority():
    run_id = ordered.run({"n": 0}).id
    advance("3m")
    age_priorities()
    # It fails while aged (the sweep has not put it back yet).
    WorkflowRun.objects.filter(id=run_id).update(status=RunStatus.FAILED, error={"message": "boom"})
    (new_id,) = rerun_many([run_id]).created
    assert WorkflowRun.objects.get(id=new_id).priority == 0
    retry_from_failed_step(run_id)
    run = WorkflowRun.objects.get(id=run_id)
    assert (run.priority, run.declared_priority) == (0, None)


@override_openworkflow(PRIORITY_AGING=AGING)
def test_the_sweep_writes_in_bounded_batches():
    ids = [ordered.run({"n": i}).id for i in range(5)]
    advance("2m")
    backend = get_backend()
    aging = owf_settings.priority_aging
    assert aging is not None
    assert list(store_aging.age_priorities(backend, aging, backend.now(), batch=2)) == [2, 2, 1]
    assert set(WorkflowRun.objects.filter(id__in=ids).values_list("priority", flat=True)) == {2}
    advance("1m")  # the second pass, over the aged runs, is batched too
    assert list(store_aging.age_priorities(backend, aging, backend.now(), batch=2)) == [2, 2, 1]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("30s", "must be None or a dict with the keys 'every' and 'ceiling' only"),
        ({"every": "30s"}, "must be None or a dict with the keys 'every' and 'ceiling' only"),
        ({"every": "soon", "ceiling": 5}, "OPENWORKFLOW['PRIORITY_AGING']['every']:"),
        ({"every": "100ms", "ceiling": 5}, "['every'] must be at least 1s"),
        ({"every": "30s", "ceiling": 5000}, "['ceiling'] must be a whole number from -1000 to 1000"),
        ({"every": "30s", "ceiling": True}, "['ceiling'] must be a whole number"),
    ],
)
def test_bad_settings_say_what_is_wrong(value, message):
    with override_settings(OPENWORKFLOW={"PRIORITY_AGING": value}):
        with pytest.raises(ValueError, match=None) as caught:
            owf_settings.priority_aging
        assert message in str(caught.value)
        (error,) = check_priority_aging()
        assert error.id == "openworkflow.E013" and message in error.msg


def test_a_workflow_declared_above_the_ceiling_is_warned_about():
    assert charge.priority == 5
    with override_settings(OPENWORKFLOW={"PRIORITY_AGING": {"every": "30s", "ceiling": 3}}):
        warnings = check_priority_aging()
    assert [w.id for w in warnings] and all(w.id == "openworkflow.W013" for w in warnings)
    assert any("'flow-display-charge' declares priority 5" in w.msg for w in warnings)
    with override_settings(OPENWORKFLOW={"PRIORITY_AGING": {"every": "30s", "ceiling": 1000}}):
        assert check_priority_aging() == []
    assert check_priority_aging() == []  # off


def test_turned_off_the_runs_it_raised_get_their_declared_priority_back_from_the_workers_sweep():
    from django_openworkflow.worker.aging import AgingSweeper
    from django_openworkflow.worker.maintenance import sweepers

    run_id = ordered.run({"n": 0}, priority=1).id
    (idle,) = [s for s in sweepers() if isinstance(s, AgingSweeper)]
    idle.start()
    idle.join(10)
    assert not idle.is_alive() and idle.sweeps == 0  # off, nothing aged: the thread looked once and ended
    with override_openworkflow(PRIORITY_AGING=AGING):
        advance("2m")
        age_priorities()
    assert WorkflowRun.objects.get(id=run_id).priority == 3
    (sweeper,) = [s for s in sweepers() if isinstance(s, AgingSweeper)]  # off now, but a run it raised remains
    sweeper.start()
    try:
        wait_until(lambda: WorkflowRun.objects.get(id=run_id).declared_priority is None, timeout=CEILING)
    finally:
        sweeper.stop()
        sweeper.join(10)
    run = WorkflowRun.objects.get(id=run_id)
    assert (run.priority, run.declared_priority) == (1, None)
