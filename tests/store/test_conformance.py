"""Backend conformance: what every store backend promises, tested through the backend's operations alone.

The same tests run unchanged against whichever database the test run uses
(``make test`` runs the suite on SQLite, PostgreSQL and MariaDB) -- the
``[database]`` variant, ``store()`` -- and, in the same run, against
the in-memory backend of ``django_openworkflow.testing.memory`` -- the
``[memory]`` variant, which has no database access at all (no ``django_db``
mark: a query would fail the test). This is the spirit of OpenWorkflow's
shared ``backend.testsuite.ts``. The tests call the backend's operations
directly, with no worker and no engine, and hold every backend to the same
promises:

1. claims: due runs oldest first, at most ``limit``; never a run that is not
   due yet, finished, or held under a live lease; ``fresh`` and
   ``lease_expired`` tell what came before; heartbeats, release, the due list;
2. fencing: a worker that lost its run (taken over or canceled) gets
   ``LeaseLost`` from every fenced write, and the write changes nothing;
3. the journal: ids in call order, values round-tripped exactly, pending
   changes committed with the next fenced write, child runs and parent wake-ups;
4. idempotency keys: one run per (workflow, key) under concurrent starts, keys
   compared byte for byte, signals and events deduplicated;
5. signal and event delivery: open waits completed, signals buffered FIFO;
   approvals and tasks opened with their wait and closed once;
6. JSON containment with PostgreSQL's ``@>`` rules, on every database;
7. the clock: aware UTC, right even when the session's time zone is not UTC;
8. the backend class made for the database, and its settings checks.

A test branches on ``connection.vendor`` only to set up a condition that
exists on one database (a session time zone, a vendor's settings check).
Where a test sets up or checks rows directly, it goes through
:func:`tables`, the same small interface over the ORM and over the
in-memory backend's rows. The few tests of what only a database has are
listed in :data:`DATABASE_ONLY`, with the reason.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.core import checks
from django.db import connection, transaction
from django.utils import timezone

from django_openworkflow.conf import owf_settings
from django_openworkflow.errors import ApprovalClosed, ApprovalNotAssigned, ApprovalNotFound
from django_openworkflow.models import (
    FINISHED_STATUSES,
    Event,
    PublishedValue,
    Signal,
    StepAttempt,
    StreamChunk,
    WorkflowRun,
)
from django_openworkflow.store import get_backend, progress
from django_openworkflow.store.backends.base import Backend
from django_openworkflow.store.core import contains
from django_openworkflow.store.records import (
    AttemptRecord,
    AttemptUpdate,
    ChildStart,
    DeliveredSignal,
    Fence,
    LeaseLost,
    NewApproval,
    NewAttempt,
    ProgressWrite,
)
from django_openworkflow.testing.memory import AttemptRow, InMemoryBackend
from tests.conftest import race

LEASE = timedelta(seconds=30)
LATER = timedelta(hours=1)
CLOSE = timedelta(seconds=5)  # how far two clock readings of one test may be apart
THREADS = 20


# -- the backend under test, and its rows --


class DatabaseTables:
    """The rows of the workflow database, read and set up with the ORM."""

    def __init__(self, backend):
        self.backend = backend

    def runs(self):
        return list(WorkflowRun.objects.order_by("id"))

    def run(self, run_id):
        return WorkflowRun.objects.get(id=run_id)

    def update_run(self, run_id, **fields):
        assert WorkflowRun.objects.filter(id=run_id).update(**fields) == 1

    def attempts(self):
        return list(StepAttempt.objects.order_by("id"))

    def attempt(self, attempt_id):
        return StepAttempt.objects.get(id=attempt_id)

    def add_attempt(self, run_id, new):
        """Put an attempt in a run's journal, unfenced; its id."""
        fields = dict(step_name=new.step_name, kind=new.kind, status=new.status, context=new.context)
        return StepAttempt.objects.create(workflow_run_id=run_id, started_at=new.started_at, **fields).id

    def signals(self):
        return list(Signal.objects.order_by("id"))

    def events(self):
        return list(Event.objects.order_by("id"))

    def snapshot(self):
        models = (WorkflowRun, StepAttempt, Signal, Event, PublishedValue, StreamChunk)
        return [list(model.objects.order_by("id").values()) for model in models]

    def progress(self, run_id):
        """What the run published, and its stream ``s``."""
        return progress.published_values(run_id), progress.read_chunks(run_id, "s", 0)

    def due_near(self, run_id, when):
        """Compared in SQL: reading a datetime back may depend on the session's time zone."""
        return WorkflowRun.objects.filter(id=run_id, available_at__range=(when - CLOSE, when + CLOSE)).exists()

    def event_waits(self, event_type, payload):
        """The backend's ``event_waits`` of the open waits for ``event_type``."""
        open_waits = StepAttempt.objects.filter(kind="event", status="running", context__event=event_type)
        with transaction.atomic(using=owf_settings.database):  # a backend may lock the waits it reads
            return self.backend.event_waits(open_waits, payload)


class MemoryTables:
    """The rows of an in-memory backend, read (as copies) and set up under its lock."""

    def __init__(self, backend):
        self.backend = backend

    def _rows(self, table):
        with self.backend.lock:
            return [copy.deepcopy(row) for _, row in sorted(table.items())]

    def runs(self):
        return self._rows(self.backend.runs)

    def run(self, run_id):
        with self.backend.lock:
            return copy.deepcopy(self.backend.runs[run_id])

    def update_run(self, run_id, **fields):
        with self.backend.lock:
            run = self.backend.runs[run_id]
            for name, value in fields.items():
                setattr(run, name, value)

    def attempts(self):
        return self._rows(self.backend.attempts)

    def attempt(self, attempt_id):
        with self.backend.lock:
            return copy.deepcopy(self.backend.attempts[attempt_id])

    def add_attempt(self, run_id, new):
        return self.backend.add_attempt(run_id, new)

    def signals(self):
        return self._rows(self.backend.signals)

    def events(self):
        return self._rows(self.backend.events)

    def snapshot(self):
        tables = (self.backend.runs, self.backend.attempts, self.backend.signals, self.backend.events)
        with self.backend.lock:
            written = (copy.deepcopy(self.backend.published), copy.deepcopy(self.backend.chunks))
        return [[asdict(row) for row in self._rows(table)] for table in tables], written

    def progress(self, run_id):
        return self.backend.published_values(run_id), self.backend.read_chunks(run_id, "s", 0)

    def due_near(self, run_id, when):
        return abs(self.run(run_id).available_at - when) <= CLOSE

    def event_waits(self, event_type, payload):
        with self.backend.lock:
            open_waits: list[AttemptRow] = [
                a
                for a in self.backend.attempts.values()
                if a.kind == "event" and a.status == "running" and (a.context or {}).get("event") == event_type
            ]
            return self.backend.event_waits(open_waits, payload)


@dataclass
class Subject:
    """A backend under test and its rows."""

    name: str
    backend: Any
    tables: DatabaseTables | MemoryTables


# Set by the ``subject`` fixture before the test starts (and its threads), cleared after it ends;
# the threads a test starts only read it.
_subject: Subject | None = None

DATABASE_ONLY = {
    "test_get_backend_is_the_class_for_the_database_made_once": (
        "store() picks a backend class by the database's vendor; the in-memory backend is made, not looked up"
    ),
    "test_check_reports_database_settings_that_would_misbehave": (
        "checks the database connection's OPTIONS (MySQL isolation level and charset, SQLite's transaction mode)"
    ),
}
"""The tests of what only a database has, by name, with the reason: they run on the database alone."""


def pytest_generate_tests(metafunc):
    """Every test runs on the in-memory backend, ``[memory]``, and on the database's, ``[database]``."""
    if "subject" not in metafunc.fixturenames:
        return
    database = pytest.param("database", id="database", marks=pytest.mark.django_db(transaction=True))
    memory = pytest.param("memory", id="memory")  # no django_db mark: the test may not query a database
    variants = [database] if metafunc.function.__name__ in DATABASE_ONLY else [memory, database]
    metafunc.parametrize("subject", variants, indirect=True)


@pytest.fixture(autouse=True)
def subject(request) -> Iterator[Subject]:
    global _subject
    if request.param == "memory":
        backend = InMemoryBackend()
        _subject = Subject("memory", backend, MemoryTables(backend))
    else:
        backend = get_backend()
        _subject = Subject("database", backend, DatabaseTables(backend))
    try:
        yield _subject
    finally:
        _subject = None


def store():
    """The backend under test."""
    assert _subject is not None
    return _subject.backend


def tables():
    """The rows of the backend under test."""
    assert _subject is not None
    return _subject.tables


# -- helpers --


def db_now():
    return store().now()


def new_run(*, due_in=None, key=None, name="conformance"):
    """Insert a pending run (due now, or ``due_in`` from now); returns its id."""
    available_at = None if due_in is None else db_now() + due_in
    run, _ = store().insert_run(
        workflow_name=name,
        version=None,
        input={"n": 1},
        available_at=available_at,
        deadline_at=None,
        idempotency_key=key,
    )
    return run.id


def held(worker="w1"):
    """A new run, claimed by ``worker``."""
    claimed = store().claim_run(new_run(), worker, LEASE)
    assert claimed is not None
    return claimed


def expire(run_id):
    """Let the run's lease run out (or its sleep end): make it due a second ago."""
    tables().update_run(run_id, available_at=db_now() - timedelta(seconds=1))


def reclaim(run_id, worker):
    """Claim the run now, whatever it was due for."""
    expire(run_id)
    claimed = store().claim_run(run_id, worker, LEASE)
    assert claimed is not None
    return claimed


def take_over(run_id, worker="w2"):
    """Another worker claims the run after its lease ran out."""
    claimed = reclaim(run_id, worker)
    assert claimed.lease_expired
    return claimed


def cancel(run_id):
    assert store().cancel_run(run_id) is True


def row(run_id):
    return tables().run(run_id)


def attempt(step_name, kind="run", status="running", **fields):
    return NewAttempt(step_name, kind, status, started_at=db_now(), **fields)


def snapshot():
    """Every row a store operation could write: runs, the journal, signals and events."""
    return tables().snapshot()


def exact(value):
    """A JSON value's text with sorted keys: ``1`` and ``1.0``, ``True`` and ``1`` differ."""
    return json.dumps(value, sort_keys=True)


def wait(run_id, kind, name, match=None, worker="w1"):
    """The engine's new signal or event wait for a held run; returns (wait id, delivered signal)."""
    now = db_now()
    if kind == "signal":
        context, target = {"signal": name}, {"signal_name": name}
    else:
        context, target = {"event": name, "match": match}, {"event_type": name}
    new_wait = attempt(name, kind, context=context)
    return store().wait_for_delivery(Fence(run_id, worker, now), park_until=now + LATER, insert=new_wait, **target)


def parked_on(kind, name, match=None):
    """A run parked on a new open wait; returns (run id, wait id)."""
    run_id = held().run.id
    wait_id, delivered = wait(run_id, kind, name, match)
    assert delivered is None and row(run_id).worker_id is None
    return run_id, wait_id


# -- 1. claims and their order --


def claim_one(run_id, worker):
    """``claim`` with one due run in the table: that run, or None."""
    claimed = store().claim(worker, 10, LEASE)
    assert [c.run.id for c in claimed] in ([], [run_id])
    return claimed[0] if claimed else None


CLAIMS = {"claim": claim_one, "claim_run": lambda run_id, worker: store().claim_run(run_id, worker, LEASE)}


def test_claim_takes_the_oldest_due_runs_first_up_to_limit():
    ids = [new_run(due_in=timedelta(seconds=-age)) for age in (4, 1, 3, 2)]
    assert [c.run.id for c in store().claim("w1", 3, LEASE)] == [ids[0], ids[2], ids[3]]
    assert [c.run.id for c in store().claim("w2", 3, LEASE)] == [ids[1]]
    assert store().claim("w3", 3, LEASE) == []
    assert sorted(run.worker_id for run in tables().runs()) == ["w1"] * 3 + ["w2"]


def finished_run(status):
    run_id = new_run(due_in=timedelta(seconds=-1))  # due by time: only its status keeps it unclaimed
    tables().update_run(run_id, status=status)
    return run_id


UNCLAIMABLE = {
    "not_yet_due": lambda: new_run(due_in=LATER),
    "held_under_a_live_lease": lambda: held("w0").run.id,
    "unknown": uuid.uuid4,
    **{status.value: lambda status=status: finished_run(status) for status in FINISHED_STATUSES},
}


@pytest.mark.parametrize("make", UNCLAIMABLE.values(), ids=UNCLAIMABLE.keys())
def test_runs_that_are_not_due_are_neither_claimed_nor_listed(make):
    run_id = make()
    before = snapshot()
    assert store().claim("w1", 10, LEASE) == []
    assert store().claim_run(run_id, "w1", LEASE) is None
    assert store().due_runs(10) == []
    assert snapshot() == before


@pytest.mark.parametrize("claim", CLAIMS.values(), ids=CLAIMS.keys())
def test_fresh_and_lease_expired_tell_what_came_before_the_claim(claim):
    run_id = new_run()
    first = claim(run_id, "w1")
    assert (first.run.id, first.worker_id, first.fresh, first.lease_expired) == (run_id, "w1", True, False)
    assert (first.run.workflow_name, first.run.input, first.run.attempts) == ("conformance", {"n": 1}, 0)
    assert abs(first.claimed_at - timezone.now()) < CLOSE
    assert claim(run_id, "w2") is None  # the lease holds

    assert first.taken_from is None

    expire(run_id)
    lease_end = row(run_id).available_at
    second = claim(run_id, "w2")
    assert (second.worker_id, second.fresh, second.lease_expired) == ("w2", False, True)
    assert row(run_id).worker_id == "w2"
    # Who lost it and when its lease ran out: the worker's log says so.
    assert second.taken_from is not None and second.taken_from.worker_id == "w1"
    assert abs(second.taken_from.lease_ended_at - lease_end) < timedelta(milliseconds=1)
    assert second.taken_from.lease_ended_at < second.claimed_at

    assert store().release(second) is True
    expire(run_id)
    third = claim(run_id, "w3")
    assert (third.worker_id, third.fresh, third.lease_expired) == ("w3", False, False)  # handed back, not lost
    assert third.taken_from is None


def test_extend_leases_extends_only_the_runs_this_worker_holds():
    mine, theirs, released = held("w1"), held("w2"), held("w1")
    assert store().release(released) is True
    before = {c.run.id: row(c.run.id).available_at for c in (theirs, released)}
    ids = [mine.run.id, theirs.run.id, released.run.id]
    assert store().extend_leases("w1", timedelta(minutes=10), ids) == 1
    assert abs(row(mine.run.id).available_at - (db_now() + timedelta(minutes=10))) < CLOSE
    assert {run_id: row(run_id).available_at for run_id in before} == before
    assert store().extend_leases("w1", timedelta(minutes=10), []) == 0


def test_release_hands_the_run_back_due_within_a_second():
    claimed = held("w1")
    now = db_now()
    assert store().release(claimed) is True
    run = row(claimed.run.id)
    assert (run.status, run.worker_id) == ("running", None)
    assert now <= run.available_at <= now + timedelta(seconds=2)


def test_due_runs_lists_due_runs_oldest_first():
    ids = [new_run(due_in=timedelta(seconds=-age)) for age in (1, 3, 2)]
    new_run(due_in=LATER)
    held("w1")
    due = store().due_runs(10)
    assert [run_id for run_id, _, _ in due] == [ids[1], ids[2], ids[0]]
    assert [at for _, at, _ in due] == [row(run_id).available_at for run_id in (ids[1], ids[2], ids[0])]
    assert store().due_runs(2) == due[:2]


# -- 2. fencing --


@dataclass
class Journaled:
    """A run held by w1 with a running step (which ``pending`` finishes) and an open signal wait."""

    run_id: uuid.UUID
    step_id: int
    wait_id: int

    def pending(self, now):
        return [
            AttemptUpdate(self.step_id, "completed", now, output={"a": 1}),
            ProgressWrite("pct", 0, 50),
            ProgressWrite("s", 0, {"chunk": 0}, stream="s"),
            NewAttempt("b", "run", "completed", now, output=2, finished_at=now),
        ]


def journaled():
    run_id, backend, now = held("w1").run.id, store(), db_now()
    step_id = backend.record_step(Fence(run_id, "w1", now), attempt("a"))
    wait_id = backend.record_step(Fence(run_id, "w1", now), attempt("w", "signal", context={"signal": "go"}))
    assert backend.send_signal(run_id, "other", "buffered", None) is False  # for a new wait to take
    return Journaled(run_id, step_id, wait_id)


def atomic_write(backend, j, worker, now, pending):
    with backend.atomic_step(lambda: Fence(j.run_id, worker, now, pending)) as record:
        record(NewAttempt("atomic", "run", "completed", now, output=3, finished_at=now))


FENCED_WRITES = {
    "record_step": lambda b, j, w, now, p: b.record_step(Fence(j.run_id, w, now, p), attempt("c")),
    "park": lambda b, j, w, now, p: b.park(Fence(j.run_id, w, now, p), now + LATER, attempt=attempt("nap", "sleep")),
    "park_with_child": lambda b, j, w, now, p: b.park(
        Fence(j.run_id, w, now, p),
        now + LATER,
        attempt=attempt("kid", "workflow"),
        child=ChildStart("kid", None, {"n": 2}),
    ),
    "complete_run": lambda b, j, w, now, p: b.complete_run(Fence(j.run_id, w, now, p), {"done": True}, None),
    "fail_run": lambda b, j, w, now, p: b.fail_run(Fence(j.run_id, w, now, p), {"type": "Boom"}, None, attempts=1),
    "reschedule_run": lambda b, j, w, now, p: b.reschedule_run(
        Fence(j.run_id, w, now, p), now + LATER, {"type": "Boom"}, 1
    ),
    "wait_for_delivery": lambda b, j, w, now, p: b.wait_for_delivery(
        Fence(j.run_id, w, now, p),
        park_until=now + LATER,
        insert=attempt("other", "signal", context={"signal": "other"}),
        signal_name="other",
    ),
    "expire_wait": lambda b, j, w, now, p: b.expire_wait(Fence(j.run_id, w, now, p), attempt_id=j.wait_id),
    "atomic_step": atomic_write,
}


@pytest.mark.parametrize("write", FENCED_WRITES.values(), ids=FENCED_WRITES.keys())
@pytest.mark.parametrize("lose", [take_over, cancel], ids=["taken_over", "canceled"])
def test_a_worker_that_lost_its_run_gets_lease_lost_and_writes_nothing(lose, write):
    j = journaled()
    lose(j.run_id)
    before = snapshot()
    with pytest.raises(LeaseLost):
        write(store(), j, "w1", db_now(), j.pending(db_now()))
    assert snapshot() == before


@pytest.mark.parametrize("write", FENCED_WRITES.values(), ids=FENCED_WRITES.keys())
def test_each_fenced_write_commits_the_pending_changes_with_it(write):
    j = journaled()
    write(store(), j, "w1", db_now(), j.pending(db_now()))
    steps = {record.step_name: record for record in store().load_history(j.run_id)}
    assert (steps["a"].status, steps["a"].output) == ("completed", {"a": 1})
    assert (steps["b"].status, steps["b"].output) == ("completed", 2)
    assert steps["a"].id < steps["w"].id < steps["b"].id
    assert tables().progress(j.run_id) == ({"pct": 50}, [(0, {"chunk": 0})])


@pytest.mark.parametrize("write", FENCED_WRITES.values(), ids=FENCED_WRITES.keys())
def test_the_replay_of_progress_writes_nothing_new(write):
    j = journaled()
    backend, now = store(), db_now()
    later = [ProgressWrite("pct", 5, 80), ProgressWrite("s", 1, {"chunk": 1}, stream="s")]
    backend.flush(
        Fence(j.run_id, "w1", now, [ProgressWrite("pct", 0, 50), ProgressWrite("s", 0, "x", stream="s"), *later])
    )
    # The replay reaches the same calls again: an earlier value, the same chunks (whatever they hold now).
    replayed = [ProgressWrite("pct", 3, 70), ProgressWrite("s", 0, "y", stream="s"), *later[1:]]
    write(backend, j, "w1", now, replayed + [ProgressWrite("s", 2, {"chunk": 2}, stream="s")])
    assert tables().progress(j.run_id) == ({"pct": 80}, [(0, "x"), (1, {"chunk": 1}), (2, {"chunk": 2})])


def test_release_by_a_worker_that_lost_the_run_changes_nothing():
    claimed = held("w1")
    take_over(claimed.run.id)
    before = snapshot()
    assert store().release(claimed) is False
    assert snapshot() == before


# -- 3. the journal --


def test_record_step_returns_ascending_ids_in_call_order():
    run_id, now = held().run.id, db_now()
    names = [f"s{i}" for i in range(5)]
    ids = [store().record_step(Fence(run_id, "w1", now), attempt(name)) for name in names]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    history = store().load_history(run_id)
    assert all(isinstance(record, AttemptRecord) for record in history)
    assert [(record.id, record.step_name) for record in history] == list(zip(ids, names))


def test_pending_attempts_are_journaled_in_order_before_the_new_step():
    run_id, now = held().run.id, db_now()
    pending = [NewAttempt(f"p{i}", "run", "completed", now, output=i, finished_at=now) for i in range(3)]
    new_id = store().record_step(Fence(run_id, "w1", now, pending), attempt("last"))
    history = store().load_history(run_id)
    assert [(r.step_name, r.output) for r in history] == [("p0", 0), ("p1", 1), ("p2", 2), ("last", None)]
    assert [r.id for r in history] == sorted(r.id for r in history) and history[-1].id == new_id


JSON_VALUES = {
    "nested": {"a": {"b": [1, {"c": [None, True, False]}], "d": {}}, "e": [], "f": [[[]]]},
    "unicode": 'é ß 中文 ☃ 😀 𝄞 \U0010fffd "quoted" \\ back\tslash\nnewline',
    "unicode_keys": {"ключ": "значение", "😀": "𝄞", "": "empty key"},
    "large_ints": [2**53, -(2**53), 2**53 - 1, 2**31, 0, -1],
    "floats": [0.1, -2.5, 1.0, 3.141592653589793, 1e-07, 123456.789, -0.0001],
    "booleans_and_null": [True, False, None, 0, 1, ""],
    "string": "just text",
    "int": 42,
    "float": 2.5,
    "true": True,
    "null": None,
}


@pytest.mark.parametrize("value", JSON_VALUES.values(), ids=JSON_VALUES.keys())
def test_history_round_trips_outputs_errors_and_contexts_exactly(value):
    run_id, backend, now = held().run.id, store(), db_now()
    step_id = backend.record_step(Fence(run_id, "w1", now), attempt("v", context={"value": value}))
    error = {"type": "E", "message": "😀", "detail": value}
    failed = NewAttempt("f", "run", "failed", now, context={"value": value}, output=value, error=error, finished_at=now)
    backend.complete_run(
        Fence(run_id, "w1", now, [AttemptUpdate(step_id, "completed", now, output=value), failed]), value, None
    )
    first, second = backend.load_history(run_id)
    assert [exact(first.output), exact(first.context)] == [exact(value), exact({"value": value})]
    assert [exact(second.output), exact(second.error)] == [exact(value), exact(error)]
    assert exact(backend.run_outcome(run_id).output) == exact(value)


def parent_with_child():
    """A parent parked on a child it started, and the child claimed by w2; returns (parent id, child claim)."""
    parent_id, now = held("w1").run.id, db_now()
    child = ChildStart("kid", "v1", {"n": 2})
    store().park(Fence(parent_id, "w1", now), now + LATER, attempt=attempt("kid", "workflow"), child=child)
    (child_id,) = store().child_run_ids(parent_id)
    claimed = store().claim_run(child_id, "w2", LEASE)
    assert claimed is not None and claimed.fresh
    return parent_id, claimed


def test_park_with_a_child_starts_a_linked_child_run():
    parent_id, child = parent_with_child()
    (wait,) = store().load_history(parent_id)
    assert (wait.kind, wait.status, wait.child_workflow_run_id) == ("workflow", "running", child.run.id)
    assert child.run.parent_step_attempt_id == wait.id
    assert (child.run.workflow_name, child.run.version, child.run.input) == ("kid", "v1", {"n": 2})
    assert store().parent_run_id(child.run.id) == parent_id
    parent = row(parent_id)
    assert parent.worker_id is None and parent.available_at > db_now() + LATER - CLOSE


FINISH_CHILD = {
    "complete_run": lambda c, now: store().complete_run(Fence(c.run.id, "w2", now), 1, c.run.parent_step_attempt_id),
    "fail_run": lambda c, now: store().fail_run(Fence(c.run.id, "w2", now), {}, c.run.parent_step_attempt_id),
    "cancel_run": lambda c, now: cancel(c.run.id),
}


@pytest.mark.parametrize("finish", FINISH_CHILD.values(), ids=FINISH_CHILD.keys())
def test_a_finishing_child_wakes_its_parked_parent(finish):
    parent_id, child = parent_with_child()
    assert store().claim_run(parent_id, "w1", LEASE) is None
    finish(child, db_now())
    assert store().claim_run(parent_id, "w1", LEASE) is not None


def parent_with_children(n):
    """A parent that started ``n`` children through pending attempts (start_workflow); (parent id, attempts)."""
    parent_id, now = held("w1").run.id, db_now()
    starts = [
        NewAttempt(f"kid-{i}", "workflow", "running", started_at=now, child=ChildStart("kid", None, {"i": i}))
        for i in range(n)
    ]
    store().flush(Fence(parent_id, "w1", now, starts))
    return parent_id, starts


def test_pending_child_starts_insert_linked_children_and_fill_in_their_ids():
    parent_id, starts = parent_with_children(3)
    history = store().load_history(parent_id)
    assert [(a.step_name, a.id, a.child_workflow_run_id) for a in history] == [
        (f"kid-{i}", start.id, start.child_run_id) for i, start in enumerate(starts)
    ]
    children = {child_id: row(child_id) for child_id in store().child_run_ids(parent_id)}
    assert {c.input["i"]: c.parent_step_attempt_id for c in children.values()} == {
        i: s.id for i, s in enumerate(starts)
    }
    assert all(c.status == "pending" for c in children.values())


@pytest.mark.parametrize("finish", FINISH_CHILD.values(), ids=FINISH_CHILD.keys())
def test_a_parent_watching_one_child_is_woken_by_it_and_by_any_childs_failure(finish):
    parent_id, starts = parent_with_children(2)
    watched, other = starts
    now = db_now()
    store().park(Fence(parent_id, "w1", now), now + LATER, wake_on_attempt=watched.id)
    claimed = store().claim_run(other.child_run_id, "w2", LEASE)
    finish(claimed, db_now())
    woken = store().claim_run(parent_id, "w1", LEASE) is not None
    assert woken is (finish is not FINISH_CHILD["complete_run"])  # the other child's success does not wake it
    if not woken:
        claimed = store().claim_run(watched.child_run_id, "w2", LEASE)
        FINISH_CHILD["complete_run"](claimed, db_now())
        assert store().claim_run(parent_id, "w1", LEASE) is not None


def test_parking_on_several_children_is_due_at_once_if_any_of_them_finished():
    parent_id, starts = parent_with_children(3)
    claimed = store().claim_run(starts[2].child_run_id, "w2", LEASE)
    store().complete_run(Fence(claimed.run.id, "w2", db_now()), 1, None)  # no wake-up: the park re-checks
    now = db_now()
    store().park(Fence(parent_id, "w1", now), now + LATER, wake_if_child_done=[s.child_run_id for s in starts])
    assert store().claim_run(parent_id, "w3", LEASE) is not None


def test_a_parent_parking_while_its_child_finishes_is_never_left_asleep():
    # The park checks whether the child finished; the child's end wakes a parked parent. Run at
    # the same moment, each must see the other's write, or the parent sleeps for a year.
    for _ in range(30):
        parent_id, child = parent_with_child()
        reclaim(parent_id, "w1")
        now = db_now()
        sides = iter(
            [
                lambda: store().park(Fence(parent_id, "w1", now), now + LATER, wake_if_child_done=[child.run.id]),
                lambda: store().complete_run(Fence(child.run.id, "w2", now), 1, child.run.parent_step_attempt_id),
            ]
        )
        lock = threading.Lock()

        def one_side():
            with lock:
                side = next(sides)
            side()

        race(one_side, n=2)
        assert store().claim_run(parent_id, "w3", LEASE) is not None, "the parent was left parked"


@pytest.mark.parametrize("child_done", [True, False], ids=["child_done", "child_running"])
def test_parking_on_a_child_that_already_finished_is_due_at_once(child_done):
    parent_id, child = parent_with_child()
    if child_done:
        store().complete_run(Fence(child.run.id, "w2", db_now()), 1, None)  # no wake-up: the parent re-checks
    reclaim(parent_id, "w1")
    now = db_now()
    store().park(Fence(parent_id, "w1", now), now + LATER, wake_if_child_done=[child.run.id])
    assert (store().claim_run(parent_id, "w3", LEASE) is not None) is child_done


# -- 4. idempotency keys --


def start(key, name="conformance"):
    """(run id, created) of an idempotent start."""
    run, created = store().insert_run(
        workflow_name=name, version=None, input=None, available_at=None, deadline_at=None, idempotency_key=key
    )
    return run.id, created


def test_concurrent_starts_with_one_key_make_one_run():
    results = race(lambda: start("order-1"))
    (run_id,) = [run.id for run in tables().runs()]
    assert {result_id for result_id, _ in results} == {run_id}
    assert [created for _, created in results].count(True) == 1


def test_a_run_tells_the_key_it_was_started_with():
    # ctx.scheduled_at reads a schedule's tick from it.
    keyed, _ = start("schedule:2026-01-01T00:00:00+00:00")
    plain, _ = start(None)
    assert store().idempotency_key(keyed) == "schedule:2026-01-01T00:00:00+00:00"
    assert store().idempotency_key(plain) is None
    assert store().idempotency_key(uuid.uuid4()) is None


def test_different_keys_and_no_key_make_new_runs():
    starts = [start("k1"), start("k2"), start("k1", name="other"), start(None), start(None)]
    assert all(created for _, created in starts)
    assert len({run_id for run_id, _ in starts}) == len(tables().runs()) == 5
    assert start("k1") == (starts[0][0], False)


KEYED_WRITES = {
    "run": ("runs", lambda run_id, key: start(key)),
    "signal": ("signals", lambda run_id, key: store().send_signal(run_id, "go", None, key)),
    "event": ("events", lambda run_id, key: store().send_event("order.paid", {}, key)),
}


@pytest.mark.parametrize(
    "keys", [("Order-1", "order-1"), ("k", "k "), ("resume", "résumé")], ids=["case", "trailing_space", "accent"]
)
@pytest.mark.parametrize("kind", KEYED_WRITES)
def test_keys_differing_in_case_trailing_space_or_accents_are_different_keys(kind, keys):
    table, write = KEYED_WRITES[kind]
    target = new_run()
    for key in keys:
        write(target, key)
    stored = [row.idempotency_key for row in getattr(tables(), table)() if row.idempotency_key is not None]
    assert sorted(stored) == sorted(keys)


def test_concurrent_signals_with_one_key_are_delivered_once():
    run_id, wait_id = parked_on("signal", "go")
    results = race(lambda: store().send_signal(run_id, "go", "once", "sig-1"))
    assert results.count(True) == 1 and results.count(False) == THREADS - 1
    (signal,) = tables().signals()
    assert signal.consumed_by_id == wait_id
    _, delivered = wait(reclaim(run_id, "w1").run.id, "signal", "go")
    assert delivered is None and row(run_id).worker_id is None  # nothing left to deliver


def test_concurrent_events_with_one_key_report_the_first_sends_count():
    for _ in range(2):
        parked_on("event", "order.paid", {"order": {"id": 7}})
    payload = {"order": {"id": 7}}
    assert race(lambda: store().send_event("order.paid", payload, "paid-7")) == [2] * THREADS
    (event,) = tables().events()
    assert event.woke == 2
    assert all(a.status == "completed" for a in tables().attempts())
    _, late_wait = parked_on("event", "order.paid", {"order": {"id": 7}})
    assert store().send_event("order.paid", payload, "paid-7") == 2
    assert tables().attempt(late_wait).status == "running"


# -- 5. signal and event delivery --


def test_a_signal_completes_the_open_wait_and_makes_the_parked_run_due():
    run_id, wait_id = parked_on("signal", "go")
    assert row(run_id).available_at > db_now() + LATER - CLOSE
    assert store().send_signal(run_id, "go", {"ok": 1}, None) is True
    (signal,) = tables().signals()
    assert signal.consumed_by_id == wait_id and signal.consumed_at is not None
    (record,) = store().load_history(run_id)
    assert (record.status, record.output) == ("completed", {"signal_id": signal.id, "data": {"ok": 1}})
    assert store().claim_run(run_id, "w2", LEASE) is not None


def test_buffered_signals_go_to_new_waits_first_in_first_out():
    run_id = held().run.id
    sends = [("go", 1), ("stop", 9), ("go", 2)]
    assert [store().send_signal(run_id, name, data, None) for name, data in sends] == [False] * 3
    ids = {signal.data: signal.id for signal in tables().signals()}
    assert wait(run_id, "signal", "go")[1] == DeliveredSignal(ids[1], 1)
    assert row(run_id).worker_id == "w1"  # a wait that took a signal does not park
    assert wait(run_id, "signal", "go")[1] == DeliveredSignal(ids[2], 2)
    assert wait(run_id, "signal", "go")[1] is None
    assert row(run_id).worker_id is None
    history = store().load_history(run_id)
    assert [(r.status, (r.output or {}).get("data")) for r in history] == [
        ("completed", 1),
        ("completed", 2),
        ("running", None),
    ]
    assert [s.consumed_by_id for s in tables().signals() if s.id == ids[9]] == [None]


def test_a_delivery_while_the_run_is_held_makes_it_due_when_it_parks():
    run_id, now = held().run.id, db_now()
    wait_id = store().record_step(Fence(run_id, "w1", now), attempt("go", "signal", context={"signal": "go"}))
    assert store().send_signal(run_id, "go", "early", None) is True
    assert row(run_id).worker_id == "w1"  # a held run is not woken: its worker sees the delivery
    rearmed = store().wait_for_delivery(Fence(run_id, "w1", now), park_until=now + LATER, waiting_attempt_id=wait_id)
    assert rearmed == (None, None)
    assert store().claim_run(run_id, "w2", LEASE) is not None


def test_an_event_wakes_only_the_waits_whose_pattern_its_payload_contains():
    (run_42, wait_42), (run_43, wait_43) = (parked_on("event", "order.paid", {"order": {"id": i}}) for i in (42, 43))
    assert store().send_event("order.refunded", {"order": {"id": 42}}, None) == 0
    assert store().send_event("order.paid", {"order": {"id": 41}}, None) == 0
    payload = {"order": {"id": 42, "total": "9.99"}, "via": "card"}
    assert store().send_event("order.paid", payload, None) == 1
    (event,) = [event for event in tables().events() if event.woke == 1]
    record = tables().attempt(wait_42)
    assert (record.status, record.output) == ("completed", {"event_id": event.id, "payload": payload})
    assert tables().attempt(wait_43).status == "running"
    assert store().claim_run(run_42, "w2", LEASE) is not None
    assert store().claim_run(run_43, "w2", LEASE) is None


def opened_task(timeout_at=None, worker="w1", **approval):
    """A held run parked on a new wait that opens a task (a form's); returns (run id, wait id, the task's record).

    ``approval``: the fields of a yes/no approval instead (``required``, ``excluded``).
    """
    run_id, now = held(worker).run.id, db_now()
    assignees = {"users": ["ada"], "groups": [], "permissions": []}
    form = {} if approval else {"form": "x.Form", "form_fields": {"a": "f.CharField"}, "initial": {"a": 1}}
    opens = NewApproval("ok", "why", assignees, timeout_at or now + LATER, **form, **approval)
    new_wait = attempt("ok", "signal", context={"approval": "ok", "form": "x.Form"})
    wait_id, delivered = store().wait_for_delivery(
        Fence(run_id, worker, now), park_until=now + LATER, insert=new_wait, approval=opens
    )
    assert delivered is None
    (record,) = store().run_approvals(run_id)
    return run_id, wait_id, record


def test_a_task_opened_with_its_wait_is_closed_once_and_delivered_to_the_wait():
    run_id, wait_id, record = opened_task()
    assert store().approval(record.id) == record and store().approval(record.id + 1000) is None
    assert (record.status, record.kind, record.step_key, record.assignees["users"]) == ("open", "input", "ok", ["ada"])
    assert (record.form, record.form_fields, record.initial) == ("x.Form", {"a": "f.CharField"}, {"a": 1})
    names = iter(range(THREADS))

    def submit():
        by = f"u{next(names)}"  # next() on one iterator from many threads: the GIL hands each its own
        try:
            return store().submit_task(record.id, by, {"a": by})
        except ApprovalClosed as exc:
            return exc

    results = race(submit, n=THREADS)
    (won,) = [result for result in results if isinstance(result, dict)]
    assert won["data"] == {"a": won["by"]} and won["at"]
    assert {exc.decided_by for exc in results if isinstance(exc, ApprovalClosed)} == {won["by"]}
    (history,) = store().load_history(run_id)
    assert history.id == wait_id and history.status == "completed" and history.output["data"] == won
    (signal,) = tables().signals()
    assert history.output["signal_id"] == signal.id and signal.consumed_by_id == wait_id
    closed = store().approval(record.id)
    assert (closed.status, closed.decided_by) == ("submitted", won["by"])
    with pytest.raises(ApprovalClosed, match=f"task {record.id} was already submitted by {won['by']} at "):
        store().decide_approval(record.id, True, "late", "")
    assert store().claim_run(run_id, "w2", LEASE) is not None  # the parked run is due


def test_a_task_past_its_timeout_is_refused_before_and_after_the_worker_journals_it():
    run_id, wait_id, record = opened_task(timeout_at=db_now() - timedelta(seconds=1))
    with pytest.raises(ApprovalClosed, match="timed out"):
        store().submit_task(record.id, "ada", {})
    assert store().approval(record.id).status == "open"  # no worker has journaled the timeout yet
    claimed = reclaim(run_id, "w1")
    assert store().expire_wait(Fence(run_id, "w1", claimed.clock()), attempt_id=wait_id) is None
    assert store().approval(record.id).status == "timed_out"
    with pytest.raises(ApprovalNotFound):
        store().decide_approval(record.id + 1000, True, "ada", "")
    assert tables().signals() == []


def test_an_approval_needing_two_sign_offs_is_delivered_with_the_second_of_many_at_once():
    run_id, wait_id, record = opened_task(required=2, excluded=["boss"])
    assert (record.kind, record.required, record.excluded, record.signoffs) == ("decision", 2, ["boss"], [])
    with pytest.raises(ApprovalNotAssigned, match="excludes them"):
        store().decide_approval(record.id, True, "boss", "")
    names = iter(range(THREADS))

    def approve():
        by = f"u{next(names)}"  # next() on one iterator from many threads: the GIL hands each its own
        try:
            return store().decide_approval(record.id, True, by, by)
        except ApprovalClosed as exc:
            return exc

    results = race(approve, n=THREADS)
    decisions = sorted((r for r in results if isinstance(r, dict)), key=lambda r: r["remaining"])
    assert [d["remaining"] for d in decisions] == [0, 1]  # counted one after the other: one delivery
    delivered, first = decisions
    assert delivered["approvers"] == [first["by"], delivered["by"]] and first["approvers"] == [first["by"]]
    (history,) = store().load_history(run_id)
    assert history.status == "completed" and history.output["data"] == delivered and len(tables().signals()) == 1
    closed = store().approval(record.id)
    assert closed.status == "approved" and [s["by"] for s in closed.signoffs] == delivered["approvers"]


def test_one_rejection_rejects_an_approval_needing_several_and_nobody_approves_twice():
    run_id, wait_id, record = opened_task(required=3)
    assert store().decide_approval(record.id, True, "a", "yes")["remaining"] == 2
    with pytest.raises(ApprovalNotAssigned, match="a approved approval .* already: it needs 2 more"):
        store().decide_approval(record.id, True, "a", "again")
    assert store().load_history(run_id)[0].status == "running" and tables().signals() == []
    rejected = store().decide_approval(record.id, False, "b", "no")
    assert (rejected["approved"], rejected["approvers"], rejected["remaining"]) == (False, ["a"], 0)
    assert store().load_history(run_id)[0].output["data"] == rejected
    assert store().approval(record.id).status == "rejected"


# -- 6. JSON containment --

CONTAINMENT = [
    # (pattern, payload, does the payload contain the pattern?) -- PostgreSQL's `payload @> pattern`
    ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}}, True),
    ({"a": [1]}, {"a": [1, 2]}, True),
    ({"a": [2, 1]}, {"a": [1, 2, 3]}, True),
    ({"a": [1, 1]}, {"a": [1]}, True),
    ({"a": [[1]]}, {"a": [[1, 2]]}, True),
    ({"a": 1}, {"a": [1, 2]}, False),  # MySQL's JSON_CONTAINS says yes
    ({"a": {"b": 1}}, {"a": [{"b": 1}]}, False),  # and here too
    ({"a": [1]}, {"a": 1}, False),
    ({"a": 1}, {"a": 1.0}, True),
    ({"a": 2.5}, {"a": 2.5}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": True}, {"a": 1}, False),
    ({"a": False}, {"a": 0}, False),
    ({"a": False}, {"a": False}, True),
    ({"a": "1"}, {"a": 1}, False),
    ({"a": "x"}, {"a": "X"}, False),
    ({"a": "e"}, {"a": "é"}, False),
    ({"a": "k"}, {"a": "k "}, False),
    ({"ключ": "😀"}, {"ключ": "😀", "b": 1}, True),
    ({}, {"a": 1}, True),
    ({}, {}, True),
    ({"a": None}, {"a": None}, True),
    ({"a": None}, {}, False),
    ({"a": None}, {"a": False}, False),
]


@pytest.mark.parametrize(
    "pattern, payload, expected", CONTAINMENT, ids=[f"{exact(p)}-in-{exact(q)}" for p, q, _ in CONTAINMENT]
)
def test_event_matching_follows_postgresql_containment(pattern, payload, expected):
    assert contains(payload, pattern) is expected
    tables().add_attempt(new_run(), attempt("w", "event", context={"event": "t", "match": pattern}))
    assert len(tables().event_waits("t", payload)) == expected
    assert store().send_event("t", payload, None) == expected


# -- 7. the clock --

NON_UTC_SESSION = {"postgresql": "SET TIME ZONE 'Asia/Kolkata'", "mysql": "SET time_zone = '+05:30'"}


@pytest.fixture(params=["utc_session", "non_utc_session"])
def session_time_zone(request):
    """The database session's time zone: as Django sets it, or UTC+05:30 where sessions have one."""
    if request.param == "utc_session":
        yield
        return
    if _subject is not None and _subject.name == "memory":
        pytest.skip("the in-memory backend has no database session")
    if connection.vendor not in NON_UTC_SESSION:
        pytest.skip(f"{connection.vendor} has no session time zone")
    with connection.cursor() as cursor:
        cursor.execute(NON_UTC_SESSION[connection.vendor])
    try:
        yield
    finally:
        connection.close()  # the next query reconnects with Django's session settings


def test_now_is_aware_utc_and_close_to_this_process_clock(session_time_zone):
    now = store().now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
    assert abs(now - timezone.now()) < CLOSE


def lands_near(run_id, delta=timedelta(0)):
    """The run is due about ``delta`` from now, compared in SQL (reading a datetime back may depend on the session)."""
    return tables().due_near(run_id, timezone.now() + delta)


def test_database_clock_writes_land_now_not_hours_off(session_time_zone):
    run_id = new_run()  # default available_at: the database clock
    assert lands_near(run_id)
    (claimed,) = store().claim("w1", 10, LEASE)
    assert claimed.run.id == run_id and lands_near(run_id, LEASE)
    assert store().extend_leases("w1", LATER, [run_id]) == 1
    assert lands_near(run_id, LATER)
    assert store().release(claimed) is True
    assert lands_near(run_id, timedelta(seconds=1)), "release: due again within about a second"
    assert abs(claimed.claimed_at - timezone.now()) < CLOSE


# -- 8. the backend class --

BACKEND_CLASSES = {
    "sqlite": "django_openworkflow.store.backends.sqlite.SQLiteBackend",
    "postgresql": "django_openworkflow.store.backends.postgresql.PostgreSQLBackend",
    "mysql": "django_openworkflow.store.backends.mysql.MySQLBackend",
}


def test_get_backend_is_the_class_for_the_database_made_once():
    backend = get_backend()
    assert isinstance(backend, Backend) and backend is store()
    assert f"{type(backend).__module__}.{type(backend).__qualname__}" == BACKEND_CLASSES[connection.vendor]
    assert get_backend() is backend and get_backend("default") is backend


def test_check_passes_with_the_test_settings():
    assert store().check() == []


SETTINGS_CHECKS = [
    ("mysql", {"isolation_level": "repeatable read"}, checks.Error, "openworkflow.E020"),
    ("mysql", {"charset": "utf8"}, checks.Warning, "openworkflow.W020"),
    ("sqlite", {"transaction_mode": None}, checks.Warning, "openworkflow.W001"),
    ("sqlite", {"init_command": "PRAGMA synchronous=NORMAL;"}, checks.Warning, "openworkflow.W001"),
]


@pytest.mark.parametrize(
    "vendor, options, level, check_id",
    SETTINGS_CHECKS,
    ids=["mysql_repeatable_read", "mysql_charset_utf8", "sqlite_not_immediate", "sqlite_without_wal"],
)
def test_check_reports_database_settings_that_would_misbehave(vendor, options, level, check_id):
    if connection.vendor != vendor:
        pytest.skip(f"a check of {vendor} settings; this run is on {connection.vendor}")
    original = connection.settings_dict["OPTIONS"]
    connection.settings_dict["OPTIONS"] = {**original, **options}
    try:
        messages = get_backend().check()
    finally:
        connection.settings_dict["OPTIONS"] = original
    assert [(type(m), m.id) for m in messages] == [(level, check_id)]
