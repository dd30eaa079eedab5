"""Flow control in the store, on every database: queues, priorities, concurrency and rate limits, debounce.

Called through ``get_backend()`` and ``spec.run()`` with no worker process
(tests/worker/test_flow_control.py runs real workers); the claim is the one
workers and Celery use.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connections, transaction

from django_openworkflow import workflow
from django_openworkflow.client import operations
from django_openworkflow.conf import owf_settings
from django_openworkflow.definitions.flow import BLOCKED_UNTIL, PROBE_INTERVAL, Concurrency, Debounce, RateLimit
from django_openworkflow.definitions.registry import registry
from django_openworkflow.errors import InvalidArgument, WorkflowRegistrationError
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import race

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)


def _noop(ctx):
    return ctx.input


@pytest.fixture
def declare():
    """Register workflows for one test, unregistered afterwards."""
    made = []

    def make(name, **options):
        spec = workflow(name=name, **options)(_noop)
        made.append(spec)
        return spec

    yield make
    for spec in made:
        registry.unregister(spec.name, spec.version)


def claim(limit=10, queues=("default",), worker="w1"):
    return get_backend().claim(worker, limit, LEASE, queues)


def claimed_ids(claimed):
    return [c.run.id for c in claimed]


# -- queues and priorities --


def test_a_worker_claims_only_its_queues(declare):
    plain, pdf = declare("fc-plain"), declare("fc-pdf", queue="pdf")
    a, b = plain.run(1), pdf.run(2)
    assert claimed_ids(claim()) == [a.id]
    assert claimed_ids(claim(queues=("pdf", "other"))) == [b.id]
    assert WorkflowRun.objects.get(id=b.id).queue == "pdf"


def test_a_start_can_name_another_queue_and_priority(declare):
    spec = declare("fc-override")
    handle = spec.run(1, queue="urgent", priority=7)
    run = WorkflowRun.objects.get(id=handle.id)
    assert (run.queue, run.priority) == ("urgent", 7)
    assert claim() == []


def test_higher_priority_is_claimed_first_then_oldest(declare):
    spec = declare("fc-priority")
    low = [spec.run(i) for i in range(3)]
    high = [spec.run(10 + i, priority=5) for i in range(2)]
    assert claimed_ids(claim(limit=3)) == [high[0].id, high[1].id, low[0].id]


# -- concurrency limits --


def test_a_concurrency_limit_admits_that_many_per_key_and_sets_the_rest_aside(declare):
    spec = declare("fc-limit", concurrency=Concurrency(2, key=lambda i: i["customer"]))
    a = [spec.run({"customer": "a", "n": n}) for n in range(4)]
    b = [spec.run({"customer": "b", "n": n}) for n in range(1)]
    got = claim(limit=10)
    assert set(claimed_ids(got)) == {a[0].id, a[1].id, b[0].id}
    assert {c.run.concurrency_key for c in got} == {"fc-limit/a", "fc-limit/b"}
    waiting = WorkflowRun.objects.filter(id__in=[a[2].id, a[3].id]).order_by("created_at")
    probe, blocked = list(waiting)
    now = get_backend().now()
    # One run per key asks again soon; the others wait out of the claim's way.
    assert now < probe.available_at <= now + PROBE_INTERVAL
    assert blocked.available_at == BLOCKED_UNTIL
    assert probe.blocked_at is not None and blocked.blocked_at is not None
    # A second claimer finds nothing: the key is full.
    assert claim(worker="w2") == []


def test_a_freed_place_wakes_the_first_waiting_run_and_it_is_admitted(declare):
    spec = declare("fc-free", concurrency=Concurrency(1))
    first, second, third = (spec.run(n) for n in range(3))
    (held,) = claim(limit=10)
    assert held.run.id == first.id
    WorkflowRun.objects.filter(id=first.id).update(status="completed", worker_id=None)
    woken = get_backend().free_place("fc-free")
    assert woken == (second.id, "default")
    assert claimed_ids(claim(limit=10)) == [second.id]
    after = WorkflowRun.objects.get(id=second.id)
    assert after.blocked_at is None and after.worker_id == "w1"
    assert WorkflowRun.objects.get(id=third.id).blocked_at is not None


def test_when_the_run_asking_for_a_place_gets_it_the_next_one_asks(declare):
    spec = declare("fc-asking", concurrency=Concurrency(1))
    first, second, third = (spec.run(n) for n in range(3))
    claim(limit=10)
    assert WorkflowRun.objects.get(id=third.id).available_at == BLOCKED_UNTIL
    # The holder finishes, but nobody calls free_place (its worker died just after).
    WorkflowRun.objects.filter(id=first.id).update(status="completed", worker_id=None)
    WorkflowRun.objects.filter(id=second.id).update(available_at=get_backend().now())  # its probe comes due
    assert claimed_ids(claim(limit=10)) == [second.id]
    # The third no longer waits for ever: it asks again within PROBE_INTERVAL.
    assert WorkflowRun.objects.get(id=third.id).available_at <= get_backend().now() + PROBE_INTERVAL


def test_a_key_found_quiet_is_looked_at_again_once_a_claim_here_sets_a_run_aside(declare):
    """Workers skip the wake-up read for a key nobody waited under; a refusal here ends that at once."""
    spec = declare("fc-quiet", concurrency=Concurrency(1))
    first = spec.run(1)
    claim(limit=10)
    assert get_backend().free_place("fc-quiet", skip_if_quiet=True) is None  # nobody waits: remembered
    second = spec.run(2)
    assert claim(limit=10) == []  # the key is full: the second run is set aside
    WorkflowRun.objects.filter(id=first.id).update(status="completed", worker_id=None)
    assert get_backend().free_place("fc-quiet", skip_if_quiet=True) == (second.id, "default")


def test_free_place_with_nobody_waiting_changes_nothing(declare):
    declare("fc-nobody", concurrency=Concurrency(1))
    assert get_backend().free_place("fc-nobody") is None


def test_a_run_whose_lease_expired_keeps_its_place(declare):
    spec = declare("fc-lease", concurrency=Concurrency(1))
    first, second = spec.run(1), spec.run(2)
    claim(limit=1)
    # Its worker died: the lease ran out. The key is full, but the run holds the place.
    WorkflowRun.objects.filter(id=first.id).update(available_at=get_backend().now() - timedelta(seconds=1))
    got = claim(limit=10, worker="w2")
    assert claimed_ids(got) == [first.id]
    assert got[0].lease_expired
    assert WorkflowRun.objects.get(id=second.id).worker_id is None


@pytest.mark.parametrize("count_parked", [False, True])
def test_a_parked_run_keeps_its_place_only_when_asked_to(declare, count_parked):
    spec = declare(f"fc-parked-{count_parked}", concurrency=Concurrency(1, count_parked=count_parked))
    sleeper, other = spec.run(1), spec.run(2)
    claim(limit=1)
    # The first run sleeps: running, no worker.
    WorkflowRun.objects.filter(id=sleeper.id).update(worker_id=None, available_at=BLOCKED_UNTIL.replace(year=3000))
    got = claimed_ids(claim(limit=10))
    assert got == ([] if count_parked else [other.id])


def test_two_claimers_at_once_never_exceed_the_limit(declare):
    spec = declare("fc-race", concurrency=Concurrency(3))
    for n in range(30):
        spec.run(n)
    workers = itertools.count()
    results = race(lambda: len(claim(limit=5, worker=f"w{next(workers)}")), 6)
    assert sum(results) == 3
    assert WorkflowRun.objects.filter(concurrency_key="fc-race", worker_id__isnull=False).count() == 3


def test_a_burst_of_refused_runs_does_not_starve_the_runs_behind_it(declare):
    limited, plain = declare("fc-burst", concurrency=Concurrency(1)), declare("fc-burst-plain")
    for n in range(60):
        limited.run(n)
    behind = [plain.run(n) for n in range(5)]
    first = claim(limit=5)
    # One limited run is admitted; the claim looks past the refused ones for the rest.
    assert len(first) == 5
    assert set(claimed_ids(first)) >= {h.id for h in behind[:4]}
    assert WorkflowRun.objects.filter(workflow_name="fc-burst", blocked_at__isnull=False).count() == 59


def test_a_claim_takes_its_key_locks_at_once_in_order(declare, monkeypatch):
    """Locks taken in a later round, out of order with the first round's, could deadlock two claimers."""
    first_key = declare("fc-lock-b", concurrency=Concurrency(1))
    later_key = declare("fc-lock-a", concurrency=Concurrency(1))  # sorts before the first round's key
    for n in range(30):
        first_key.run(n)
    later = later_key.run(0)
    store = get_backend()
    calls: list[list[str]] = []
    real = store.lock_keys

    def recording(keys):
        calls.append(list(keys))
        return real(keys)

    monkeypatch.setattr(store, "lock_keys", recording)
    got = claim(limit=5)
    assert calls == [["concurrency:fc-lock-b"]]
    # The later round left the other key's run alone; the next claim takes it.
    assert later.id not in claimed_ids(got)
    assert later.id in claimed_ids(claim(limit=5))


def test_canceling_a_run_that_holds_a_place_wakes_the_next(declare):
    spec = declare("fc-cancel", concurrency=Concurrency(1))
    first, second = spec.run(1), spec.run(2)
    claim(limit=10)  # first held, second set aside
    WorkflowRun.objects.filter(id=second.id).update(available_at=BLOCKED_UNTIL)
    operations.cancel(first.id)
    assert WorkflowRun.objects.get(id=second.id).available_at <= get_backend().now()
    assert claimed_ids(claim(limit=10)) == [second.id]


# -- rate limits --


def test_a_rate_limit_admits_that_many_starts_per_window_and_defers_the_rest(declare):
    spec = declare("fc-rate", rate_limit=RateLimit(2, per="1h"))
    handles = [spec.run(n) for n in range(5)]
    got = claim(limit=10)
    assert claimed_ids(got) == [handles[0].id, handles[1].id]
    now = get_backend().now()
    later = WorkflowRun.objects.filter(id__in=[h.id for h in handles[2:]])
    # Due when the window has room again: an hour after the first starts.
    assert all(now + timedelta(minutes=59) < run.available_at < BLOCKED_UNTIL for run in later)
    assert claim(limit=10) == []


def test_a_rate_limit_counts_starts_not_later_slices(declare):
    spec = declare("fc-rate-slices", rate_limit=RateLimit(1, per="1h"))
    handle = spec.run(1)
    claim(limit=1)
    # The run parks and wakes: its next claim is not a start.
    WorkflowRun.objects.filter(id=handle.id).update(worker_id=None, available_at=get_backend().now())
    assert claimed_ids(claim(limit=1)) == [handle.id]


# -- debounce --


def test_debounced_starts_fold_into_one_run_with_the_last_input(declare):
    spec = declare("fc-debounce", debounce=Debounce("5s", key=lambda i: i["doc"]))
    handles = [spec.run({"doc": 1, "edit": n}) for n in range(5)]
    other = spec.run({"doc": 2, "edit": 0})
    assert len({h.id for h in handles}) == 1
    assert handles[0].created and not any(h.created for h in handles[1:])
    run = WorkflowRun.objects.get(id=handles[0].id)
    assert run.input == {"doc": 1, "edit": 4}
    assert run.available_at > get_backend().now() + timedelta(seconds=4)
    assert other.id != handles[0].id
    # Once claimed, the next start makes a new run.
    WorkflowRun.objects.filter(id=run.id).update(available_at=get_backend().now())
    assert handles[0].id in claimed_ids(claim(limit=1))
    assert WorkflowRun.objects.get(id=run.id).debounce_key is None
    assert spec.run({"doc": 1, "edit": 5}).id != run.id


def test_debounce_max_wait_caps_the_delay(declare):
    spec = declare("fc-debounce-max", debounce=Debounce("1h", max_wait="1s"))
    first = spec.run(1)
    spec.run(2)
    run = WorkflowRun.objects.get(id=first.id)
    assert run.available_at <= run.created_at + timedelta(seconds=1)


def test_concurrent_debounced_starts_make_one_run(declare):
    spec = declare("fc-debounce-race", debounce=Debounce("10s"))
    inputs = itertools.count()
    ids = race(lambda: spec.run(next(inputs)).id, 8)
    assert len(ids) == 8 and len(set(ids)) == 1
    assert WorkflowRun.objects.filter(workflow_name="fc-debounce-race").count() == 1


def _debounce_index() -> tuple[bool, bool]:
    """Whether two runs of one workflow may share a debounce key, and whether the key's index is partial."""
    alias = owf_settings.database
    now = get_backend().now()
    WorkflowRun.objects.create(workflow_name="fc-debounce-mig", debounce_key="k", available_at=now)
    WorkflowRun.objects.bulk_create(WorkflowRun(workflow_name="fc-debounce-mig", available_at=now) for _ in range(2))
    try:
        with transaction.atomic(using=alias):
            WorkflowRun.objects.create(workflow_name="fc-debounce-mig", debounce_key="k", available_at=now)
        shared = True
    except IntegrityError:
        shared = False
    WorkflowRun.objects.filter(workflow_name="fc-debounce-mig").delete()
    vendor = connections[alias].vendor
    with connections[alias].cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(
                "SELECT x.indpred IS NOT NULL FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE i.relname = 'owf_run_debounce_key_uniq'"
            )
            return shared, cursor.fetchone()[0]
        if vendor == "sqlite":
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'owf_run_debounce_key_uniq'")
            row = cursor.fetchone()  # none: a constraint of the table's own definition
            return shared, row is not None and "WHERE" in row[0]
    return shared, False  # MySQL: no partial indexes


def test_the_debounce_index_migration_applies_and_reverts():
    # 0026: partial on PostgreSQL and SQLite (a run without a key has no entry), plain on MySQL;
    # unique throughout, and whole again once reverted.
    alias = owf_settings.database
    partial = connections[alias].vendor != "mysql"
    assert _debounce_index() == (False, partial)
    call_command("migrate", "django_openworkflow", "0025", database=alias, verbosity=0)
    try:
        assert _debounce_index() == (False, False)
    finally:
        call_command("migrate", "django_openworkflow", database=alias, verbosity=0)
    assert _debounce_index() == (False, partial)


def test_a_debounced_start_takes_no_idempotency_key(declare):
    spec = declare("fc-debounce-key", debounce=Debounce("1s"))
    with pytest.raises(InvalidArgument, match="debounces"):
        spec.run(1, idempotency_key="k")


# -- children and re-runs carry their own flow control --


def test_a_rerun_keeps_queue_priority_and_limits(declare):
    spec = declare("fc-rerun", queue="q2", priority=3, concurrency=Concurrency(4, key="tenant"))
    handle = spec.run(1)
    WorkflowRun.objects.filter(id=handle.id).update(status="completed")
    (new_id,) = operations.rerun_many([handle.id]).created
    run = WorkflowRun.objects.get(id=new_id)
    assert (run.queue, run.priority, run.concurrency_key, run.concurrency_limit) == ("q2", 3, "fc-rerun/tenant", 4)


# -- bad declarations and starts --


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queue": "has spaces"}, "queue must be"),
        ({"queue": ""}, "queue must be"),
        ({"priority": 5000}, "priority must be"),
        ({"priority": True}, "priority must be"),
        ({"concurrency": -1}, "Concurrency limit must be"),
        ({"concurrency": "2"}, "concurrency must be a Concurrency"),
        ({"rate_limit": 3}, "rate_limit must be a RateLimit"),
    ],
)
def test_bad_flow_declarations_are_errors_at_declaration(options, message):
    with pytest.raises(WorkflowRegistrationError, match=message):
        workflow(name="fc-bad", **options)(_noop)
    assert registry.get("fc-bad", None) is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RateLimit(0), "RateLimit limit must be"),
        (lambda: RateLimit(5, per="-1s"), "RateLimit per"),
        (lambda: RateLimit(5, per="soon"), "RateLimit per"),
        (lambda: Debounce("0s"), "Debounce period must be longer than zero"),
        (lambda: Concurrency(2, key=42), "Concurrency key must be"),
        (lambda: Concurrency(2, count_parked="yes"), "Concurrency count_parked must be"),
    ],
)
def test_bad_limits_are_errors_at_the_declaration_that_uses_them(make, message):
    bad = make()  # made before @workflow: it keeps its error for @workflow, which knows the name
    with pytest.raises(WorkflowRegistrationError, match=message):
        bad.check()
    keyword = {Concurrency: "concurrency", RateLimit: "rate_limit", Debounce: "debounce"}[type(bad)]
    with pytest.raises(WorkflowRegistrationError, match=f"^workflow 'fc-bad': {message}"):
        workflow(name="fc-bad", **{keyword: bad})(_noop)
    assert registry.get("fc-bad", None) is None


def test_a_key_function_that_fails_names_the_workflow_and_writes_nothing(declare):
    spec = declare("fc-badkey", concurrency=Concurrency(1, key=lambda i: i["customer"]))
    with pytest.raises(InvalidArgument, match="concurrency_key function of workflow 'fc-badkey' raised"):
        spec.run({})
    with pytest.raises(InvalidArgument, match="must be a string or a number"):
        spec.run({"customer": None})
    with pytest.raises(InvalidArgument, match="queue must be"):
        spec.run({"customer": 1}, queue="no spaces allowed")
    assert not WorkflowRun.objects.filter(workflow_name="fc-badkey").exists()


def test_a_concurrency_key_for_a_workflow_without_a_limit_is_refused(declare):
    spec = declare("fc-nolimit")
    with pytest.raises(InvalidArgument, match="declares no concurrency"):
        spec.run(1, concurrency_key="x")
