"""Fair queues (store/fairness.py): a flood under one key takes turns with the other keys' runs.

The queue "tenants" is fair in tests/settings.py. Claims go through the
store, one or several at a time, as a worker's would; no timing: the order
the runs are claimed in is the result.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from django_openworkflow import workflow
from django_openworkflow.conf import owf_settings
from django_openworkflow.errors import WorkflowRegistrationError
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.testing import drain
from tests.conftest import ROOT
from tests.fixtures.flowapp.models import Ledger
from tests.fixtures.flowapp.workflows import default, limited, tenant

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)
FLOOD = 12


def start_flood_then_small(queue: str | None = None) -> None:
    """FLOOD runs of tenant "big" in one call, then three runs each of tenants "b", "c" and "d"."""
    tenant.run_many([{"tenant": "big", "n": i} for i in range(FLOOD)], queue=queue)
    for i in range(3):
        for name in "bcd":
            tenant.run({"tenant": name, "n": i}, queue=queue)


def tenants_claimed(batch: int = 1, queue: str = "tenants") -> list[list[str]]:
    """Claim every due run of ``queue``, ``batch`` at a time; each claim's tenants."""
    claims = []
    while claimed := get_backend().claim("w", batch, LEASE, (queue,)):
        claims.append([c.run.input["tenant"] for c in claimed])
    return claims


def test_a_flood_under_one_key_takes_turns_with_the_other_keys():
    start_flood_then_small()
    order = [name for claim in tenants_claimed() for name in claim]
    # Oldest first would claim the 12 runs of "big" before any other: the small tenants
    # are claimed within the first three rounds instead.
    assert order == ["big", "b", "c", "d"] * 3 + ["big"] * (FLOOD - 3)


def test_batched_claims_take_one_run_of_each_key_a_round():
    start_flood_then_small()
    claims = tenants_claimed(batch=4)
    assert [sorted(claim) for claim in claims[:3]] == [["b", "big", "c", "d"]] * 3
    assert claims[3:] == [["big"] * 4, ["big"] * 4, ["big"]]


def test_a_queue_not_listed_as_fair_claims_oldest_first_as_before():
    start_flood_then_small(queue="default")
    assert not WorkflowRun.objects.filter(fair_at__isnull=False).exists()  # nothing placed, no key
    assert not WorkflowRun.objects.filter(fairness_key__isnull=False).exists()
    order = [name for claim in tenants_claimed(queue="default") for name in claim]
    assert order == ["big"] * FLOOD + ["b", "c", "d"] * 3


def test_priorities_still_come_first_in_a_fair_queue():
    start_flood_then_small()
    urgent = tenant.run({"tenant": "big", "n": 99}, priority=5)
    (first,) = get_backend().claim("w", 1, LEASE, ("tenants",))
    assert first.run.id == urgent.id


def test_a_key_with_no_waiting_run_starts_from_its_due_time_not_after_its_old_runs():
    """A key's last place counts only while its runs wait: one that drained starts afresh, not a quantum behind."""
    first = tenant.run({"tenant": "big", "n": 0})
    assert get_backend().claim("w", 1, LEASE, ("tenants",))  # "big" has nothing waiting now
    second = tenant.run({"tenant": "big", "n": 1})
    third = tenant.run({"tenant": "big", "n": 2})
    places = dict(WorkflowRun.objects.values_list("id", "fair_at"))
    due = dict(WorkflowRun.objects.values_list("id", "created_at"))
    assert places[second.id] - due[second.id] < owf_settings.fairness_quantum
    assert places[third.id] == places[second.id] + owf_settings.fairness_quantum
    assert places[first.id] < places[second.id]


def test_runs_without_a_declared_key_take_their_concurrency_key_or_their_workflow_name():
    plain = default.run({"n": 1}, queue="tenants")
    keyed = limited.run({"customer": "acme", "n": 1}, queue="tenants")
    declared = tenant.run({"tenant": "acme", "n": 1})
    keys = dict(WorkflowRun.objects.values_list("id", "fairness_key"))
    assert keys == {plain.id: "flow-default", keyed.id: "flow-limited/acme", declared.id: "flow-tenant/acme"}


def test_runs_started_before_the_queue_was_fair_are_adopted_and_claimed():
    with override_settings(OPENWORKFLOW={"FAIR_QUEUES": []}):
        old = [tenant.run({"tenant": "old", "n": i}).id for i in range(3)]
    assert not WorkflowRun.objects.filter(fair_at__isnull=False).exists()
    new = tenant.run({"tenant": "new", "n": 0}).id
    claimed = [c.run.id for c in get_backend().claim("w", 10, LEASE, ("tenants",))]
    # The fair claim reads only runs with a place in line: the old ones get one when it finds too few.
    assert sorted(claimed) == sorted([new, *old])
    assert set(WorkflowRun.objects.filter(id__in=old).values_list("fairness_key", flat=True)) == {"flow-tenant"}


def test_a_worker_serving_a_fair_and_a_plain_queue_claims_both():
    start_flood_then_small()
    plain = default.run({"n": 1})
    # Each claim serves one kind of queue first, the other with the room left; they take turns.
    claims = [get_backend().claim("w", 3, LEASE, ("default", "tenants")) for _ in range(2)]
    assert [len(claim) for claim in claims] == [3, 3]
    assert plain.id in {c.run.id for claim in claims for c in claim}


def test_drain_runs_a_fair_queue_in_the_workers_order():
    start_flood_then_small()
    drain(queues=["tenants"])
    order = list(Ledger.objects.filter(event="end").order_by("id").values_list("key", flat=True))
    assert order == ["big", "b", "c", "d"] * 3 + ["big"] * (FLOOD - 3)


def test_a_children_fan_out_is_spread_over_its_key():
    from tests.fixtures.flowapp.workflows import fan_out

    parent = fan_out.run({"tenant": "big", "children": 5})
    drain(queues=["default"], until=lambda: WorkflowRun.objects.filter(queue="tenants").count() == 5)
    places = sorted(WorkflowRun.objects.filter(queue="tenants").values_list("fair_at", flat=True))
    assert [b - a for a, b in zip(places, places[1:], strict=False)] == [owf_settings.fairness_quantum] * 4
    assert parent.fetch().status == "running"


def test_a_bad_fairness_key_is_refused_with_the_workflows_name():
    with pytest.raises(WorkflowRegistrationError, match="workflow 'unfair': fairness_key must be None, a string"):
        workflow(name="unfair", fairness_key=42)(lambda ctx: None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"FAIR_QUEUES": "tenants"}, "FAIR_QUEUES'] must be a list of queue names"),
        ({"FAIR_QUEUES": 5}, "FAIR_QUEUES'] must be a list of queue names, got 5"),
        ({"FAIR_QUEUES": True}, "FAIR_QUEUES'] must be a list of queue names, got True"),
        ({"FAIR_QUEUES": ["tenants"], "FAIRNESS_QUANTUM": "0s"}, "FAIRNESS_QUANTUM'] must be longer than zero"),
    ],
)
def test_bad_fairness_settings_say_what_to_write(settings, message):
    with override_settings(OPENWORKFLOW=settings), pytest.raises(ValueError, match=message):
        tenant.run({"tenant": "a", "n": 0})


def test_a_small_tenants_runs_finish_before_a_flood_drains_in_a_worker_process(workers):
    """One `runworkflows` process with one slot: the small tenant's runs end among the first, not after the flood."""
    tenant.run_many([{"tenant": "big", "n": i, "pause": 0} for i in range(30)])
    small = [tenant.run({"tenant": "small", "n": i, "pause": 0}).id for i in range(2)]
    proc = workers.start("--burst", "--concurrency", "1", "--queue", "tenants", "--poll", "20ms")
    assert proc.wait(60) == 0, ROOT
    order = list(Ledger.objects.filter(event="end").order_by("id").values_list("run_id", flat=True))
    assert len(order) == 32
    assert sorted(order.index(run_id) for run_id in small) == [1, 3]


def test_the_system_checks_name_bad_fairness_settings_and_a_key_no_fair_queue_uses():
    from django_openworkflow.checks import check_fairness

    with override_settings(OPENWORKFLOW={"FAIRNESS_QUANTUM": "soon"}):
        assert [m.id for m in check_fairness()] == ["openworkflow.E007"]
    assert check_fairness() == []  # tests/settings.py lists "tenants", the fixtures' fair queue
    with override_settings(OPENWORKFLOW={"FAIR_QUEUES": []}):
        (warning,) = check_fairness()
    assert warning.id == "openworkflow.W007" and "'flow-tenant'" in warning.msg


def test_runs_set_aside_by_their_limit_go_to_the_back_of_the_line_and_come_back_when_woken():
    """So that the fair claim does not read past a busy key's waiting runs on every claim."""
    runs = [limited.run({"customer": "acme", "n": i}, queue="tenants").id for i in range(5)]
    claimed = get_backend().claim("w", 10, LEASE, ("tenants",))
    assert len(claimed) == 2  # Concurrency(2) per customer: three set aside
    waiting = WorkflowRun.objects.filter(id__in=runs, worker_id__isnull=True)
    assert waiting.count() == 3
    assert all(run.fair_at == run.available_at for run in waiting)  # a place at the new due time, not the old one
    assert get_backend().free_place("flow-limited/acme") is not None
    woken = WorkflowRun.objects.get(id__in=runs, worker_id__isnull=True, available_at__lte=get_backend().now())
    assert woken.fair_at == woken.available_at
    # The runs still set aside hold no place: the key's next start is placed after the woken one, not in 9999.
    later = limited.run({"customer": "acme", "n": 5}, queue="tenants")
    assert WorkflowRun.objects.get(id=later.id).fair_at == woken.fair_at + owf_settings.fairness_quantum


def test_run_many_places_each_keys_runs_after_its_waiting_ones_over_more_keys_than_a_query_reads():
    keys = [f"t{i}" for i in range(150)]  # more than KEYS_A_QUERY: two queries for the last places
    tenant.run_many([{"tenant": key, "n": 0} for key in keys])
    tenant.run_many([{"tenant": key, "n": 1} for key in keys])
    places = {(key, n): at for key, n, at in WorkflowRun.objects.values_list("fairness_key", "input__n", "fair_at")}
    quantum = owf_settings.fairness_quantum
    assert all(places[(f"flow-tenant/{key}", 1)] == places[(f"flow-tenant/{key}", 0)] + quantum for key in keys)
