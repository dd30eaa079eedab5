"""An in-memory store backend: every store operation on plain Python structures, no database at all.

What it is for: the engine's unit tests, and other fast tests that need a
store but not a database. :class:`InMemoryBackend` has the public operations
of :class:`~django_openworkflow.store.backends.base.Backend` that the engine,
the slice runner, the worker loop, the client and the backend conformance
suite (``tests/store/test_conformance.py``) call -- claims and leases,
fenced journal writes, history, children, idempotent starts, signals,
events, the clock -- and returns the same records (``store/records.py``).
The conformance suite runs every test on it as well as on the database, so
it keeps the same promises: a worker that lost its run gets ``LeaseLost``
and writes nothing, values round-trip as JSON, keys compare byte for byte,
event patterns match with PostgreSQL's containment rules.

It is modeled on procrastinate's ``InMemoryConnector``: the tables are
dicts of rows (:class:`RunRow`, :class:`AttemptRow`, :class:`SignalRow`,
:class:`EventRow`, with the models' field names) that a test may read
under :attr:`InMemoryBackend.lock` to check or set up state.

What it does not do: share anything across processes (each instance is
its own store, for one process), wake workers with LISTEN/NOTIFY
(:meth:`~InMemoryBackend.listener` is None: workers poll), answer the
ORM-based pages (the admin, the CLI's listings, pruning, the dashboard,
which query the models), or be returned by ``get_backend()``: pass it to
what you test. Every operation holds one lock for its whole length, so
concurrent threads see each operation as one transaction, serialized.

To run workflows on it (``tests/engine/test_without_a_database.py`` does):
:class:`Clock`, a clock a test moves forward (sleeps, retries' backoff,
wait timeouts); :func:`start`, a run's start; :func:`drain`, which executes
every due run through the workers' slice runner until none is due.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import fields as columns_of
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from .. import tracing
from ..definitions.flow import BLOCKED_UNTIL, DEFAULT_QUEUE, PROBE_INTERVAL
from ..definitions.payload import to_json_value
from ..durations import Duration, parse_duration
from ..errors import RunNotFound, SignalError
from ..states import CLAIMABLE_STATUSES, FINISHED_STATUSES, RunStatus, StepKind, StepStatus
from ..store.core import contains
from ..store.records import (
    AttemptRecord,
    AttemptUpdate,
    CancelRequested,
    ChildStart,
    ClaimedRun,
    DeliveredSignal,
    EventOutcome,
    EventStart,
    LeaseLost,
    NewAttempt,
    Pending,
    RunOutcome,
    RunRecord,
    RunState,
    StartedRun,
    event_run_key,
)

if TYPE_CHECKING:
    from ..definitions.registry import WorkflowSpec
    from ..engine.execute import SliceResult

__all__ = ["AttemptRow", "Clock", "EventRow", "InMemoryBackend", "RunRow", "SignalRow", "drain", "start"]


def _stored(value: Any) -> Any:
    """``value`` as a JSON column gives it back: encoded like the models' JSON fields, then decoded."""
    return None if value is None else json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _read(value: Any) -> Any:
    """A stored JSON value for a caller, who may change it without changing the store."""
    return copy.deepcopy(value)


# -- the tables: one dataclass per model, with the model's field names (``*_id`` for foreign keys) --


@dataclass
class RunRow:
    """A workflow run (``WorkflowRun``)."""

    id: uuid.UUID
    workflow_name: str
    version: str | None = None
    status: str = RunStatus.PENDING
    input: Any = None
    output: Any = None
    error: Any = None
    idempotency_key: str | None = None
    worker_id: str | None = None
    attempts: int = 0
    available_at: datetime = BLOCKED_UNTIL
    deadline_at: datetime | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    concurrency_counts_parked: bool = False
    blocked_at: datetime | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    debounce_key: str | None = None
    parent_step_attempt_id: int | None = None
    continued_from_id: uuid.UUID | None = None
    cancel_requested_at: datetime | None = None
    retention: timedelta | None = None
    trace_context: dict[str, str] | None = None
    wake_on_attempt_id: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_parked(self) -> bool:
        """Running with no worker holding it: sleeping, waiting, or backing off before a retry."""
        return self.status == RunStatus.RUNNING and self.worker_id is None

    @property
    def is_held(self) -> bool:
        """Running and held by a worker right now."""
        return self.status == RunStatus.RUNNING and self.worker_id is not None

    @property
    def is_claimable(self) -> bool:
        return self.status in CLAIMABLE_STATUSES

    def is_due(self, now: datetime) -> bool:
        return self.is_claimable and self.available_at <= now


RUN_COLUMNS = frozenset(column.name for column in columns_of(RunRow))


@dataclass
class AttemptRow:
    """A step attempt of a run's journal (``StepAttempt``)."""

    id: int
    workflow_run_id: uuid.UUID
    step_name: str
    kind: str
    status: str
    output: Any = None
    error: Any = None
    context: Any = None
    child_workflow_run_id: uuid.UUID | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def record(self) -> AttemptRecord:
        return AttemptRecord(
            self.id,
            self.step_name,
            str(self.kind),  # plain strings, as a database gives them back (rows may hold the enums)
            str(self.status),
            _read(self.output),
            _read(self.error),
            _read(self.context),
            self.child_workflow_run_id,
        )


@dataclass
class SignalRow:
    """A signal sent to a run, buffered until a wait consumes it (``Signal``)."""

    id: int
    workflow_run_id: uuid.UUID
    name: str
    data: Any = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    consumed_by_id: int | None = None
    consumed_at: datetime | None = None


@dataclass
class EventRow:
    """A broadcast event (``Event``)."""

    id: int
    event_type: str
    payload: Any = None
    idempotency_key: str | None = None
    woke: int = 0
    created_at: datetime | None = None


@dataclass
class _Fenced:
    """What a fenced write does besides committing its pending changes (the arguments of ``_commit``)."""

    insert: NewAttempt | None = None
    inserts: list[NewAttempt] = field(default_factory=list)
    run_fields: dict[str, Any] = field(default_factory=dict)
    start_child: ChildStart | None = None
    wake_when_child_done: list[Any] | None = None
    wake_parent_of: int | None = None
    ended_badly: bool = False


def _spawns(change: AttemptUpdate | NewAttempt) -> bool:
    return isinstance(change, NewAttempt) and change.child is not None


class InMemoryBackend:
    """The store's operations on dicts of rows, for tests that need no database (see the module's docstring).

    Thread safety: every table below, and the id counters, are guarded by
    :attr:`lock`. Each public operation holds it from start to end (it is
    reentrant: an event's starts insert runs inside the event's operation),
    so an operation is atomic and isolated like the database backends'
    transactions, and a check it makes (the fence) stays true until it has
    written. An atomic step's own code runs outside the lock. Tests that read
    or change the tables directly hold the lock too.
    """

    display_name = "in-memory"
    alias = "memory"

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        """``clock``: the store's clock (aware UTC); by default this process's."""
        self._clock = clock or (lambda: datetime.now(UTC))
        self.lock = threading.RLock()
        # The tables, in insertion (= id) order; all guarded by self.lock.
        self.runs: dict[uuid.UUID, RunRow] = {}
        self.attempts: dict[int, AttemptRow] = {}
        self.signals: dict[int, SignalRow] = {}
        self.events: dict[int, EventRow] = {}
        self._attempt_ids = itertools.count(1)
        self._signal_ids = itertools.count(1)
        self._event_ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {len(self.runs)} runs>"

    # -- what the database backends have and this one needs not --

    def close_connection(self) -> None:
        """No connection to close."""

    def close_thread_connections(self) -> None:
        """No connection to close."""

    def is_transient(self, error: BaseException | None) -> bool:
        """No database error to retry."""
        return False

    def listener(self, channels: Iterable[str], on_notify: Callable[[str, str], None]) -> None:
        """No LISTEN/NOTIFY: workers poll."""
        return None

    def check(self) -> list[Any]:
        """No database settings to check."""
        return []

    # -- the clock --

    def now(self) -> datetime:
        """The store's clock, aware UTC."""
        return self._clock().astimezone(UTC)

    # -- claims and leases (queue.py) --

    def claim(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str] = (DEFAULT_QUEUE,)
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` due runs of ``queues``, highest priority first, then oldest."""
        if limit <= 0:
            return []
        with self.lock:
            now = self.now()
            due = [run for run in self._due(now) if run.queue in queues]
            due.sort(key=lambda run: (-run.priority, run.available_at))  # stable: ties in insertion order
            return self._lease_admitted(due, worker_id, now, lease, limit)

    def claim_run(self, run_id: Any, worker_id: str, lease: timedelta) -> ClaimedRun | None:
        """Claim one run by id if it is due and its limits admit it."""
        with self.lock:
            now = self.now()
            run = self.runs.get(run_id)
            if run is None or not run.is_due(now):
                return None
            claimed = self._lease_admitted([run], worker_id, now, lease, 1)
            return claimed[0] if claimed else None

    def _due(self, now: datetime) -> list[RunRow]:
        return [run for run in self.runs.values() if run.is_due(now)]

    def _lease_admitted(
        self, due: list[RunRow], worker_id: str, now: datetime, lease: timedelta, want: int
    ) -> list[ClaimedRun]:
        claimed = []
        for run in self._admit(due, now, want):
            fresh, lease_expired = run.started_at is None, run.worker_id is not None
            run.status, run.worker_id, run.available_at = RunStatus.RUNNING, worker_id, now + lease
            run.started_at = run.started_at or now
            run.updated_at, run.blocked_at, run.debounce_key = now, None, None
            claimed.append(ClaimedRun(self._record(run), worker_id, now, fresh=fresh, lease_expired=lease_expired))
        return claimed

    @staticmethod
    def _needs_place(run: RunRow) -> bool:
        """Under a concurrency limit and not holding a place (a held run's lease expiring keeps its place)."""
        if run.concurrency_key is None or run.worker_id is not None:
            return False
        return run.status == RunStatus.PENDING or not run.concurrency_counts_parked

    @staticmethod
    def _needs_rate(run: RunRow) -> bool:
        """Under a rate limit and never started: its first claim is the start the limit counts."""
        return run.rate_key is not None and run.started_at is None

    def _admit(self, due: list[RunRow], now: datetime, want: int) -> list[RunRow]:
        """The first ``want`` runs of ``due`` their limits let through; those refused on the way are set aside.

        The rules of ``QueueOps._admit``: places are counted from the runs
        (held, or in progress if parked runs keep theirs), starts from
        ``started_at`` within the rate window. A run refused a place waits at
        ``BLOCKED_UNTIL`` except one per key, which asks again after
        ``PROBE_INTERVAL``; a run over a rate limit waits until the window has room.
        """
        held: Counter[str] = Counter()
        in_progress: Counter[str] = Counter()
        for run in self.runs.values():
            if run.concurrency_key is not None and run.status == RunStatus.RUNNING:
                in_progress[run.concurrency_key] += 1
                held[run.concurrency_key] += run.worker_id is not None
        window_ends: dict[str, list[datetime]] = {}
        waiting: Counter[str] = Counter()
        admitted: list[RunRow] = []
        blocked: list[RunRow] = []
        deferred: list[tuple[RunRow, datetime]] = []
        for run in due:
            if len(admitted) == want:
                break
            needs_place, needs_rate = self._needs_place(run), self._needs_rate(run)
            if needs_place:
                assert run.concurrency_key is not None and run.concurrency_limit is not None
                taken = (in_progress if run.concurrency_counts_parked else held)[run.concurrency_key]
                if taken >= run.concurrency_limit:
                    blocked.append(run)
                    continue
            if needs_rate:
                assert run.rate_key is not None and run.rate_limit is not None and run.rate_period is not None
                period = timedelta(seconds=run.rate_period)
                if run.rate_key not in window_ends:
                    window_ends[run.rate_key] = self._starts_in_window(run.rate_key, period, now)
                ends = window_ends[run.rate_key]
                if len(ends) >= run.rate_limit:
                    # Each start leaving the window makes room for one; the claim then checks again.
                    k = waiting[run.rate_key]
                    waiting[run.rate_key] += 1
                    deferred.append((run, ends[k % len(ends)] + period * (k // len(ends))))
                    continue
                ends.append(now + period)
            if needs_place:
                assert run.concurrency_key is not None
                held[run.concurrency_key] += 1
                in_progress[run.concurrency_key] += 1
            admitted.append(run)
        self._set_aside(blocked, deferred, now)
        self._keep_one_asking(admitted, now)
        return admitted

    def _starts_in_window(self, rate_key: str, period: timedelta, now: datetime) -> list[datetime]:
        """When each start of ``rate_key`` within its window leaves it, oldest first."""
        starts = sorted(
            run.started_at
            for run in self.runs.values()
            if run.rate_key == rate_key and run.started_at is not None and run.started_at > now - period
        )
        return [started + period for started in starts]

    def _set_aside(self, blocked: list[RunRow], deferred: list[tuple[RunRow, datetime]], now: datetime) -> None:
        probes: dict[str | None, RunRow] = {}
        for run in blocked:
            probe = probes.setdefault(run.concurrency_key, run)
            run.available_at = now + PROBE_INTERVAL if probe is run else BLOCKED_UNTIL
            run.blocked_at = run.blocked_at or now
            run.updated_at = now
        for run, until in deferred:
            run.available_at, run.updated_at = until, now

    def _keep_one_asking(self, admitted: list[RunRow], now: datetime) -> None:
        """A run that waited for a place got one: if the others of its key all wait at BLOCKED_UNTIL, one asks again."""
        keys = sorted({run.concurrency_key for run in admitted if run.blocked_at is not None and run.concurrency_key})
        for key in keys:
            taken = {run.id for run in admitted}
            waiting = [run for run in self._blocked(key) if run.id not in taken]
            if waiting:
                first = min(waiting, key=lambda run: (run.available_at, -run.priority, run.blocked_at))
                if first.available_at >= BLOCKED_UNTIL:
                    first.available_at = now + PROBE_INTERVAL

    def _blocked(self, concurrency_key: str) -> list[RunRow]:
        """The claimable runs of a key that wait for a place, no worker holding them."""
        return [
            run
            for run in self.runs.values()
            if run.is_claimable
            and run.concurrency_key == concurrency_key
            and run.blocked_at is not None
            and run.worker_id is None
        ]

    def extend_leases(self, worker_id: str, lease: timedelta, run_ids: list[Any]) -> int:
        """The heartbeat: push the lease of the runs this worker holds among ``run_ids``."""
        with self.lock:
            now = self.now()
            extended = 0
            for run_id in set(run_ids):
                run = self.runs.get(run_id)
                if run is not None and run.is_held and run.worker_id == worker_id:
                    run.available_at, run.updated_at = now + lease, now
                    extended += 1
            return extended

    def held_among(self, worker_id: str, run_ids: list[Any]) -> set[Any]:
        """Which of these runs ``worker_id`` still holds."""
        with self.lock:
            return {
                run_id
                for run_id in run_ids
                if (run := self.runs.get(run_id)) is not None and run.is_held and run.worker_id == worker_id
            }

    def cancel_requested_among(self, run_ids: list[Any]) -> set[Any]:
        """Which of these runs someone asked to cancel after their compensations."""
        with self.lock:
            return {
                run_id
                for run_id in run_ids
                if (run := self.runs.get(run_id)) is not None and run.cancel_requested_at is not None
            }

    def due_runs(self, limit: int) -> list[tuple[uuid.UUID, datetime, str]]:
        """(id, available_at, queue) of up to ``limit`` runs due now, oldest first."""
        with self.lock:
            due = sorted(self._due(self.now()), key=lambda run: run.available_at)
            return [(run.id, run.available_at, run.queue) for run in due[: max(limit, 0)]]

    def due_children(self, run_id: Any) -> list[tuple[uuid.UUID, str]]:
        """(id, queue) of the due runs a run started: its children, its successor."""
        with self.lock:
            return [
                (run.id, run.queue)
                for run in self._due(self.now())
                if run.continued_from_id == run_id or self._parent_id(run) == run_id
            ]

    def run_state(self, run_id: Any) -> RunState | None:
        """Status, holder, next due time and parent of a run (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            if run is None:
                return None
            parent = self.runs.get(self._parent_id(run))
            return RunState(
                str(run.status),
                run.worker_id,
                run.available_at,
                parent.id if parent else None,
                run.queue,
                parent.queue if parent else None,
            )

    # -- the journal: history and fenced writes (journal.py) --

    def load_history(self, run_id: Any) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first."""
        with self.lock:
            return [a.record() for a in self.attempts.values() if a.workflow_run_id == run_id]

    def record_step(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        attempt: NewAttempt,
        *,
        unless_canceling: bool = False,
    ) -> int:
        """Commit ``pending`` and record that a step started; returns the new attempt's id."""
        new_id = self._commit(run_id, worker_id, now, pending, _Fenced(insert=attempt), unless_canceling)
        assert new_id is not None
        return new_id

    def record_steps(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        attempts: list[NewAttempt],
        *,
        unless_canceling: bool = False,
    ) -> list[int]:
        """Commit ``pending`` and record that several steps started; returns their ids."""
        self._commit(run_id, worker_id, now, pending, _Fenced(inserts=attempts), unless_canceling)
        return [attempt.id for attempt in attempts if attempt.id is not None]

    def flush(
        self, run_id: Any, worker_id: str, now: datetime, pending: Pending, *, unless_canceling: bool = False
    ) -> None:
        """Commit ``pending`` alone."""
        self._commit(run_id, worker_id, now, pending, _Fenced(), unless_canceling)

    def park(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        until: datetime,
        *,
        attempt: NewAttempt | None = None,
        child: ChildStart | None = None,
        wake_if_child_done: list[Any] | None = None,
        wake_on_attempt: int | None = None,
        unless_canceling: bool = False,
    ) -> None:
        """Let go of the run until ``until`` (a sleep, a wait for children, a retry backoff)."""
        fenced = _Fenced(
            insert=attempt,
            run_fields={"worker_id": None, "available_at": until, "wake_on_attempt_id": wake_on_attempt},
            start_child=child,
            wake_when_child_done=wake_if_child_done,
        )
        self._commit(run_id, worker_id, now, pending, fenced, unless_canceling)

    def complete_run(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        output: Any,
        parent_step_id: int | None,
        *,
        unless_canceling: bool = False,
    ) -> None:
        """The run returned ``output``: finish it and wake a parent waiting on it."""
        fields = {"status": RunStatus.COMPLETED, "output": _stored(output), "error": None, "finished_at": now}
        self._commit(
            run_id, worker_id, now, pending, _Fenced(run_fields=fields, wake_parent_of=parent_step_id), unless_canceling
        )

    def fail_run(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        error: dict[str, Any],
        parent_step_id: int | None,
        attempts: int | None = None,
    ) -> None:
        """Fail the run for good with ``error`` and wake a parent waiting on it."""
        fields: dict[str, Any] = {"status": RunStatus.FAILED, "error": _stored(error), "finished_at": now}
        if attempts is not None:
            fields["attempts"] = attempts
        fenced = _Fenced(run_fields=fields, wake_parent_of=parent_step_id, ended_badly=True)
        self._commit(run_id, worker_id, now, pending, fenced, False)

    def cancel_held(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        error: dict[str, Any],
        parent_step_id: int | None,
    ) -> None:
        """End a run whose cancel was requested, its compensations done; close its open steps, wake a parent."""
        with self.lock:
            run = self._fence(run_id, worker_id)
            self._flush(run_id, pending, now)
            self._update(run, now, status=RunStatus.CANCELED, error=_stored(error), finished_at=now)
            self._close_open_steps([run_id], now)
            if parent_step_id is not None:
                self.wake_parent(parent_step_id, now, ended_badly=True)

    def is_canceled(self, run_id: Any) -> bool:
        """Whether the run was canceled, is being canceled (compensating), or is gone."""
        with self.lock:
            run = self.runs.get(run_id)
            return run is None or run.status == RunStatus.CANCELED or run.cancel_requested_at is not None

    def reschedule_run(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        until: datetime,
        error: dict[str, Any],
        attempts: int | None = None,
        *,
        unless_canceling: bool = False,
    ) -> None:
        """Run the workflow again from the top at ``until``, keeping ``error`` as the reason."""
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "error": _stored(error)}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(run_id, worker_id, now, pending, _Fenced(run_fields=fields), unless_canceling)

    def clear_error(self, run_id: Any, worker_id: str, now: datetime) -> None:
        """Drop a note the run carried from an earlier slice."""
        self._commit(run_id, worker_id, now, [], _Fenced(run_fields={"error": None}), False)

    def release(
        self, claimed: ClaimedRun, retry_in: timedelta = timedelta(seconds=1), error: dict[str, Any] | None = None
    ) -> bool:
        """Hand a held run back, due after ``retry_in``; False if this worker no longer holds it."""
        with self.lock:
            now = self.now()
            fields: dict[str, Any] = {"worker_id": None, "available_at": now + retry_in}
            if error is not None:
                fields["error"] = _stored(error)
            try:
                self._commit(claimed.run.id, claimed.worker_id, now, [], _Fenced(run_fields=fields), False)
            except LeaseLost:
                return False
            return True

    def wait_for_delivery(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        *,
        park_until: datetime,
        insert: NewAttempt | None = None,
        waiting_attempt_id: int | None = None,
        signal_name: str | None = None,
        event_type: str | None = None,
        unless_canceling: bool = False,
    ) -> tuple[int | None, DeliveredSignal | None]:
        """A signal or event wait: record it (a new signal wait takes the oldest buffered signal) or park."""
        with self.lock:
            run = self._fence_keeping_completions(run_id, worker_id, now, pending, unless_canceling)
            self._update(run, now)
            self._flush(run_id, pending, now)
            attempt_id = waiting_attempt_id
            if insert is not None:
                attempt_id = self._insert_attempt(run_id, insert, now)
                if signal_name is not None:
                    signal = self._consume_signal(run_id, signal_name, attempt_id, now)
                    if signal is not None:
                        taken = self.attempts[attempt_id]
                        taken.status, taken.finished_at = StepStatus.COMPLETED, now
                        taken.output = {"signal_id": signal.id, "data": _read(signal.data)}
                        return attempt_id, DeliveredSignal(signal.id, _read(signal.data))
            assert attempt_id is not None, "a wait to record or to re-arm"
            wait = self.attempts.get(attempt_id)
            delivered = wait is not None and wait.status != StepStatus.RUNNING
            run.worker_id, run.available_at = None, now if delivered else park_until
            return (attempt_id if insert is not None else None), None

    def _consume_signal(self, run_id: Any, name: str, attempt_id: int, now: datetime) -> SignalRow | None:
        """Take the oldest buffered signal of ``name`` for a new wait."""
        for signal in self.signals.values():
            if signal.workflow_run_id == run_id and signal.name == name and signal.consumed_by_id is None:
                signal.consumed_by_id, signal.consumed_at = attempt_id, now
                return signal
        return None

    def expire_wait(self, run_id: Any, worker_id: str, now: datetime, pending: Pending, *, attempt_id: int) -> Any:
        """Time out an open wait; returns None, or the output a sender delivered just before."""
        with self.lock:
            self._update(self._fence(run_id, worker_id), now)
            self._flush(run_id, pending, now)
            wait = self.attempts.get(attempt_id)
            if wait is None:
                return None
            if wait.status == StepStatus.RUNNING:
                wait.status, wait.output, wait.finished_at = StepStatus.COMPLETED, {"timed_out": True}, now
                return None
            return _read(wait.output)

    @contextmanager
    def atomic_step(
        self, run_id: Any, worker_id: str, clock: Callable[[], datetime], pending: Pending
    ) -> Iterator[Callable[[NewAttempt], None]]:
        """Around a step's own code: yields ``record(attempt)``; the journal entries are written after it, fenced.

        The step's code runs outside the lock; if it raises, nothing is written.
        """
        records: list[NewAttempt] = []
        yield records.append
        with self.lock:
            now = clock()
            self._update(self._fence(run_id, worker_id), now)
            self._flush(run_id, pending, now)
            for new in records:
                self._insert_attempt(run_id, new, now)

    # -- reads the engine makes --

    def run_outcome(self, run_id: Any) -> RunOutcome | None:
        """A run's status, output and error (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else self._outcome(run)

    def run_outcomes(self, run_ids: list[Any]) -> dict[Any, RunOutcome]:
        """The outcomes of several runs, by id (missing runs are left out)."""
        with self.lock:
            return {run_id: self._outcome(self.runs[run_id]) for run_id in run_ids if run_id in self.runs}

    @staticmethod
    def _outcome(run: RunRow) -> RunOutcome:
        return RunOutcome(str(run.status), _read(run.output), _read(run.error), run.finished_at)

    def successor_id(self, run_id: Any) -> Any:
        """The id of the run this one continued as, or None."""
        with self.lock:
            return next((run.id for run in self.runs.values() if run.continued_from_id == run_id), None)

    def continue_as_new(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        *,
        input: Any,
        version: str | None,
        flow: dict[str, Any],
        unless_canceling: bool = False,
    ) -> Any:
        """End the run as ``continued`` and start its successor with ``input``; returns the successor's id."""
        with self.lock:
            run = self._fence_keeping_completions(run_id, worker_id, now, pending, unless_canceling)
            self._flush(run_id, pending, now)
            self._update(run, now, status=RunStatus.CONTINUED, output=None, error=None, finished_at=now)
            successor = self._insert_run(
                {
                    "workflow_name": run.workflow_name,
                    "version": version,
                    "input": input,
                    "available_at": now,
                    "deadline_at": run.deadline_at,
                    "parent_step_attempt_id": run.parent_step_attempt_id,
                    "continued_from_id": run_id,
                    **flow,
                    "retention": run.retention,  # the successor is the same logical run: same retention
                },
                now,
            )
            if run.parent_step_attempt_id in self.attempts:
                self.attempts[run.parent_step_attempt_id].child_workflow_run_id = successor.id
            return successor.id

    def holds_lease(self, run_id: Any, worker_id: str) -> bool:
        """Whether ``worker_id`` holds the run and its lease has not run out."""
        with self.lock:
            run = self.runs.get(run_id)
            return run is not None and run.is_held and run.worker_id == worker_id and run.available_at > self.now()

    def run_status(self, run_id: Any) -> str | None:
        """The run's current status (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else str(run.status)

    # -- the fence and its building blocks (all called with the lock held) --

    def _fence(self, run_id: Any, worker_id: str, *, unless_canceling: bool = False) -> RunRow:
        """The run, if ``worker_id`` holds it; else LeaseLost. Writes nothing.

        With ``unless_canceling``, a run whose cancel was requested raises
        :class:`CancelRequested` (the caller keeps the completions it carried).
        """
        run = self.runs.get(run_id)
        if run is None or not run.is_held or run.worker_id != worker_id:
            raise LeaseLost(run_id)
        if unless_canceling and run.cancel_requested_at is not None:
            raise CancelRequested(run_id)
        return run

    def _fence_keeping_completions(
        self, run_id: Any, worker_id: str, now: datetime, pending: Pending, unless_canceling: bool
    ) -> RunRow:
        """The fence of a write that may be refused for a cancel request: then write the completions it carried.

        The steps that finished stay in the journal, so they are compensated;
        children not started yet are dropped with the rest of the write.
        """
        try:
            return self._fence(run_id, worker_id, unless_canceling=unless_canceling)
        except CancelRequested:
            run = self._fence(run_id, worker_id)
            self._update(run, now)
            self._flush(run_id, [change for change in pending if not _spawns(change)], now)
            raise

    def _commit(
        self, run_id: Any, worker_id: str, now: datetime, pending: Pending, fenced: _Fenced, unless_canceling: bool
    ) -> int | None:
        """``pending``, new attempts, run fields, a child start and wake-ups in one fenced operation.

        The order of ``JournalOps._commit``: the plain pending attempts, then
        those starting children, then ``insert``, then ``inserts`` (ids ascend
        in that order); then the parent's wake-up, the check of finished
        children, and the child linked to the new attempt.
        """
        with self.lock:
            run = self._fence_keeping_completions(run_id, worker_id, now, pending, unless_canceling)
            run_fields = dict(fenced.run_fields)
            self._update(run, now, **run_fields)
            self._flush(run_id, pending, now)
            new_id = self._insert_attempt(run_id, fenced.insert, now) if fenced.insert is not None else None
            for new in fenced.inserts:
                self._insert_attempt(run_id, new, now)
            if fenced.wake_parent_of is not None:
                self.wake_parent(fenced.wake_parent_of, now, fenced.ended_badly)
            done = fenced.wake_when_child_done or []
            if any(child_id in self.runs and self.runs[child_id].is_finished for child_id in done):
                run.available_at = now
            if fenced.start_child is not None:
                assert new_id is not None, "a child starts with the step that waits for it"
                self._start_child(fenced.start_child, new_id, now)
            return new_id

    def _update(self, run: RunRow, now: datetime, **run_fields: Any) -> None:
        for name, value in run_fields.items():
            setattr(run, name, value)
        run.updated_at = now

    def _flush(self, run_id: Any, pending: Pending, now: datetime) -> None:
        """Finish the attempts ``pending`` updates, then insert its new ones: plain first, those with children last."""
        for change in pending:
            if isinstance(change, AttemptUpdate):
                self._finish_attempt(change)
        for change in pending:
            if isinstance(change, NewAttempt) and change.child is None:
                self._insert_attempt(run_id, change, now)
        for change in pending:
            if isinstance(change, NewAttempt) and change.child is not None:
                self._insert_attempt(run_id, change, now)

    def _finish_attempt(self, change: AttemptUpdate) -> None:
        attempt = self.attempts.get(change.attempt_id)
        if attempt is not None:
            attempt.status, attempt.finished_at = change.status, change.finished_at
            attempt.output, attempt.error = _stored(change.output), _stored(change.error)

    def _insert_attempt(self, run_id: Any, new: NewAttempt, now: datetime) -> int:
        """Insert an attempt, fill in its id, and start the child it carries (filling in ``child_run_id``)."""
        attempt = AttemptRow(
            id=next(self._attempt_ids),
            workflow_run_id=run_id,
            step_name=new.step_name,
            kind=new.kind,
            status=new.status,
            output=_stored(new.output),
            error=_stored(new.error),
            context=_stored(new.context),
            created_at=now,
            started_at=new.started_at,
            finished_at=new.finished_at,
        )
        self.attempts[attempt.id] = attempt
        new.id = attempt.id
        if new.child is not None:
            new.child_run_id = self._start_child(new.child, attempt.id, now)
        return attempt.id

    def _start_child(self, start: ChildStart, attempt_id: int, now: datetime) -> uuid.UUID:
        child = self._insert_run(
            {
                "workflow_name": start.workflow_name,
                "version": start.version,
                "input": start.input,
                "available_at": now,
                **start.flow,
                "parent_step_attempt_id": attempt_id,
            },
            now,
        )
        self.attempts[attempt_id].child_workflow_run_id = child.id
        return child.id

    def _close_open_steps(self, run_ids: list[Any], now: datetime) -> None:
        """A canceled run's sleep, wait or executing step ends with it."""
        for attempt in self.attempts.values():
            if attempt.workflow_run_id in run_ids and attempt.status == StepStatus.RUNNING:
                attempt.status, attempt.finished_at = StepStatus.FAILED, now
                attempt.error = {"type": "Canceled", "message": "the run was canceled"}

    def wake_parent(self, parent_step_attempt_id: int, now: Any, ended_badly: bool = False) -> int:
        """Make a parent run due now if it is parked waiting on this step attempt.

        A parent watching one child of many (``wake_on_attempt_id``) is woken
        by that child, or by any child that failed or was canceled; a parent
        a worker holds is left alone (it reads its children's state itself).
        """
        with self.lock:
            waiting = self.attempts.get(parent_step_attempt_id)
            if waiting is None or waiting.status != StepStatus.RUNNING:
                return 0
            parent = self.runs.get(waiting.workflow_run_id)
            if parent is None or not parent.is_parked or parent.available_at <= now:
                return 0
            if not ended_badly and parent.wake_on_attempt_id not in (None, parent_step_attempt_id):
                return 0
            parent.available_at = now
            return 1

    # -- runs: starting, reading, canceling, waking, retrying (runs.py) --

    def insert_run(
        self,
        *,
        workflow_name: str,
        version: str | None,
        input: Any,
        available_at: datetime | None,
        deadline_at: datetime | None,
        idempotency_key: str | None,
        flow: dict[str, Any] | None = None,
        debounce: tuple[str, timedelta, timedelta | None] | None = None,
    ) -> tuple[StartedRun, bool]:
        """Insert a pending run; returns (run, created). A start with a key its workflow has returns that run."""
        row = dict(
            workflow_name=workflow_name,
            version=version,
            input=input,
            available_at=available_at,
            deadline_at=deadline_at,
            idempotency_key=idempotency_key,
            **(flow or {}),
        )
        with self.lock:
            now = self.now()
            if debounce is not None:
                return self._debounce(row, now, *debounce)
            existing = self._keyed(workflow_name, idempotency_key)
            if existing is not None:
                return StartedRun(existing.id, existing.queue), False
            run = self._insert_run(row, now)
            return StartedRun(run.id, run.queue), True

    def _keyed(self, workflow_name: str, idempotency_key: str | None) -> RunRow | None:
        if idempotency_key is None:
            return None
        keyed = (run for run in self.runs.values() if run.idempotency_key == idempotency_key)
        return next((run for run in keyed if run.workflow_name == workflow_name), None)

    def _insert_run(self, row: dict[str, Any], now: datetime) -> RunRow:
        """Insert a run from column values (none for ``available_at``: due now), with the starter's trace context."""
        unknown = set(row) - RUN_COLUMNS
        if unknown:
            raise TypeError(f"not columns of a run: {', '.join(sorted(unknown))}")
        values = {name: value for name, value in row.items() if value is not None}  # None: the column's default
        values.setdefault("id", uuid.uuid4())
        values.setdefault("trace_context", tracing.current_context())
        values["input"] = _stored(values.get("input"))
        values.setdefault("available_at", now)
        run = RunRow(**{**values, "created_at": now, "updated_at": now})
        self.runs[run.id] = run
        return run

    def _debounce(
        self, row: dict[str, Any], now: datetime, key: str, delay: timedelta, max_delay: timedelta | None
    ) -> tuple[StartedRun, bool]:
        """Fold a start into the pending run with this debounce key, or create it."""
        for run in self.runs.values():
            if run.workflow_name == row["workflow_name"] and run.debounce_key == key and run.status == "pending":
                until = now + delay
                if max_delay is not None and run.created_at is not None:
                    until = min(until, run.created_at + max_delay)
                run.input, run.available_at, run.updated_at = _stored(row["input"]), until, now
                return StartedRun(run.id, run.queue), False
        run = self._insert_run({**row, "available_at": now + delay, "debounce_key": key}, now)
        return StartedRun(run.id, run.queue), True

    def insert_runs(self, runs: list[dict[str, Any]]) -> list[tuple[Any, bool]]:
        """Insert pending runs; ``(id, created)`` for each, in order (a key already taken: that run, False)."""
        with self.lock:
            now = self.now()
            results = []
            for fields in runs:
                existing = self._keyed(fields["workflow_name"], fields.get("idempotency_key"))
                if existing is not None:
                    results.append((existing.id, False))
                else:
                    results.append((self._insert_run({"status": RunStatus.PENDING, **fields}, now).id, True))
            return results

    def get_run(self, run_id: Any) -> RunRow | None:
        """A copy of the run's row, or None."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else copy.deepcopy(run)

    def _parent_id(self, run: RunRow) -> Any:
        attempt = self.attempts.get(run.parent_step_attempt_id) if run.parent_step_attempt_id else None
        return attempt.workflow_run_id if attempt is not None else None

    def parent_run_id(self, run_id: Any) -> Any:
        """The id of the run that started this one as a child, or None."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else self._parent_id(run)

    def child_run_ids(self, run_id: Any) -> list[Any]:
        """The ids of the runs this one started as children, oldest first."""
        with self.lock:
            return [run.id for run in self.runs.values() if self._parent_id(run) == run_id]

    def cancel_run(self, run_id: Any) -> bool:
        """Cancel a run that has not finished; False if it already had."""
        return bool(self.cancel_runs([run_id]))

    def cancel_runs(self, run_ids: list[Any]) -> list[Any]:
        """Cancel many runs; their open steps close, waiting parents wake. Returns the ids it canceled."""
        with self.lock:
            now = self.now()
            targets = [run for run_id in run_ids if (run := self.runs.get(run_id)) is not None and run.is_claimable]
            for run in targets:
                self._update(run, now, status=RunStatus.CANCELED, worker_id=None, finished_at=now)
            self._close_open_steps([run.id for run in targets], now)
            for run in targets:
                if run.parent_step_attempt_id is not None:
                    self.wake_parent(run.parent_step_attempt_id, now, ended_badly=True)
            # A canceled run may have held a place, or been the run asking for one for the others.
            for key in sorted({run.concurrency_key for run in targets if run.concurrency_key is not None}):
                self.free_place(key)
            return [run.id for run in targets]

    def request_cancel(self, run_ids: list[Any]) -> list[Any]:
        """Ask a worker to cancel these runs after their compensations; a run nobody holds is made due now."""
        with self.lock:
            now = self.now()
            asked = []
            for run_id in run_ids:
                run = self.runs.get(run_id)
                if run is None or not run.is_claimable or run.cancel_requested_at is not None:
                    continue
                self._update(run, now, cancel_requested_at=now)
                if run.worker_id is None:
                    run.status, run.available_at = RunStatus.RUNNING, now
                asked.append(run.id)
            return asked

    def free_place(self, concurrency_key: str, *, skip_if_quiet: bool = False) -> tuple[uuid.UUID, str] | None:
        """A run of this key let go of its place: make the first run waiting for one due now; its (id, queue)."""
        with self.lock:
            waiting = self._blocked(concurrency_key)
            if not waiting:
                return None
            first = min(waiting, key=lambda run: (-run.priority, run.blocked_at, run.created_at))
            first.available_at = self.now()
            return first.id, first.queue

    def wake_run(self, run_id: Any) -> bool:
        """ "Retry now" for one run."""
        return bool(self.wake_runs([run_id]))

    def wake_runs(self, run_ids: list[Any]) -> list[Any]:
        """Make parked, backing-off or scheduled runs due now (a sleep in progress ends now); the ids woken."""
        with self.lock:
            now = self.now()
            woken = []
            for run_id in run_ids:
                run = self.runs.get(run_id)
                if run is None or not run.is_claimable or run.worker_id is not None or run.available_at <= now:
                    continue
                self._update(run, now, available_at=now)
                woken.append(run.id)
            for attempt in self.attempts.values():
                if (
                    attempt.workflow_run_id in woken
                    and attempt.kind == StepKind.SLEEP
                    and attempt.status == StepStatus.RUNNING
                ):
                    attempt.context = {"resume_at": now.isoformat(), "woken_early": True}
            return woken

    def retry_failed_run(self, run_id: Any) -> bool:
        """Retry one failed run from its failed step."""
        return bool(self.retry_failed_runs([run_id]))

    def retry_failed_runs(self, run_ids: list[Any]) -> list[Any]:
        """Send failed runs back to pending with a new workflow-level attempt; the ids sent back."""
        with self.lock:
            now = self.now()
            failed = [run for run_id in run_ids if (run := self.runs.get(run_id)) and run.status == RunStatus.FAILED]
            for run in failed:
                self._update(
                    run,
                    now,
                    status=RunStatus.PENDING,
                    attempts=run.attempts + 1,
                    error=None,
                    finished_at=None,
                    worker_id=None,
                    available_at=now,
                )
            return [run.id for run in failed]

    # -- signals and events (messages.py) --

    def send_signal(self, run_id: Any, name: str, data: Any, idempotency_key: str | None) -> bool:
        """Store a signal for a run and hand it to an open wait for that name.

        True if delivered now; False if buffered, or a duplicate of an earlier send with the same key.
        """
        with self.lock:
            run = self.runs.get(run_id)
            if run is None:
                raise RunNotFound(f"no workflow run with id {run_id}")
            if run.is_finished:
                raise SignalError(f"workflow run {run_id} is {run.status}; signals can only be sent to unfinished runs")
            if idempotency_key is not None and any(
                s.workflow_run_id == run_id and s.name == name and s.idempotency_key == idempotency_key
                for s in self.signals.values()
            ):
                return False  # the same key was sent before: delivered once
            now = self.now()
            signal = SignalRow(next(self._signal_ids), run_id, name, _stored(data), idempotency_key, now)
            self.signals[signal.id] = signal
            waiting = next(
                (
                    a
                    for a in self.attempts.values()
                    if a.workflow_run_id == run_id
                    and a.kind == StepKind.SIGNAL
                    and a.status == StepStatus.RUNNING
                    and (a.context or {}).get("signal") == name
                ),
                None,
            )
            if waiting is None:
                return False
            signal.consumed_by_id, signal.consumed_at = waiting.id, now
            return self._deliver(waiting, {"signal_id": signal.id, "data": _read(signal.data)}, now)

    def send_event(self, event_type: str, payload: Any, idempotency_key: str | None) -> int:
        """Record an event and wake every run waiting for its type with a pattern it contains; how many."""
        return self.publish_event(event_type, payload, idempotency_key).woke

    def publish_event(
        self,
        event_type: str,
        payload: Any,
        idempotency_key: str | None,
        starts: Sequence[EventStart] = (),
        subscribers: Sequence[str] = (),
    ) -> EventOutcome:
        """:meth:`send_event`, which also starts a run for each of ``starts`` (see ``MessageOps.publish_event``)."""
        with self.lock:
            first = next(
                (
                    e
                    for e in self.events.values()
                    if idempotency_key is not None
                    and e.event_type == event_type
                    and e.idempotency_key == idempotency_key
                ),
                None,
            )
            if first is not None:
                names = {*subscribers, *(start.workflow_name for start in starts)}
                earlier = sorted(
                    (run for run in self.runs.values() if run.workflow_name in names),
                    key=lambda run: run.workflow_name,
                )
                key = event_run_key(first.id)
                started = [(StartedRun(run.id, run.queue), False) for run in earlier if run.idempotency_key == key]
                return EventOutcome(first.id, first.woke, started, repeat=True)
            now = self.now()
            event = EventRow(next(self._event_ids), event_type, _stored(payload), idempotency_key, 0, now)
            self.events[event.id] = event
            started = [self.insert_run(**start.run_fields(event.id)) for start in starts]
            waiting = [
                a
                for a in self.attempts.values()
                if a.kind == StepKind.EVENT
                and a.status == StepStatus.RUNNING
                and (a.context or {}).get("event") == event_type
            ]
            output = {"event_id": event.id, "payload": _read(event.payload)}
            event.woke = sum(self._deliver(a, output, now) for a in self.event_waits(waiting, event.payload))
            return EventOutcome(event.id, event.woke, started)

    def event_waits(self, waits: Iterable[AttemptRow], payload: Any) -> list[AttemptRow]:
        """The open event waits among ``waits`` whose ``context["match"]`` the payload contains."""
        return [a for a in waits if contains(payload, (a.context or {}).get("match"))]

    def _deliver(self, attempt: AttemptRow, output: dict[str, Any], now: datetime) -> bool:
        """Complete a still-open waiting attempt with ``output`` and wake its run if it is parked."""
        if attempt.status != StepStatus.RUNNING:
            return False
        attempt.status, attempt.output, attempt.finished_at = StepStatus.COMPLETED, _stored(output), now
        run = self.runs.get(attempt.workflow_run_id)
        if run is not None and run.is_parked:
            self._update(run, now, available_at=now)
        return True

    # -- for tests --

    def add_attempt(self, run_id: Any, attempt: NewAttempt) -> int:
        """Put an attempt in a run's journal without the fence (a test's setup); its id."""
        with self.lock:
            return self._insert_attempt(run_id, attempt, self.now())

    # -- records --

    @staticmethod
    def _record(run: RunRow) -> RunRecord:
        return RunRecord(
            run.id,
            run.workflow_name,
            run.version,
            _read(run.input),
            run.attempts,
            run.deadline_at,
            run.parent_step_attempt_id,
            _read(run.error),
            run.concurrency_key,
            run.cancel_requested_at,
            run.queue,
            run.started_at,
            _read(run.trace_context),
        )


# -- driving runs on an in-memory backend: a clock to move, a start, a drain --


class Clock:
    """This process's clock, moved forward by :meth:`advance`: pass it as ``InMemoryBackend(clock=...)``.

    It keeps running with real time between moves, as the engine expects:
    within a slice the engine reads the time as the claim's timestamp plus
    the time elapsed since (``ClaimedRun.clock``), so a run that sleeps for
    an hour is due once the clock was advanced by an hour, not a moment
    later. Thread safety: the offset is guarded by a lock (the engine's
    step threads and the test's thread read the clock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)  # guarded by _lock

    def __call__(self) -> datetime:
        with self._lock:
            offset = self._offset
        return datetime.now(UTC) + offset

    def advance(self, duration: Duration) -> datetime:
        """Move the clock forward by ``duration`` (``"1h"``, seconds, a timedelta); returns the new time."""
        delta = parse_duration(duration)
        if delta < timedelta(0):
            raise ValueError(f"a clock moves forward only, got {duration!r}")
        with self._lock:
            self._offset += delta
        return self()


def start(
    backend: InMemoryBackend,
    workflow: WorkflowSpec,
    input: Any = None,
    *,
    deadline: Duration | None = None,
    idempotency_key: str | None = None,
) -> uuid.UUID:
    """Start a run of ``workflow`` (its spec from ``@workflow``) on ``backend``, due now; its id.

    ``spec.run()`` starts runs on the workflow database; this is the start
    for an in-memory backend: the input must be JSON, the run gets the
    workflow's queue, priority and limits, and ``deadline`` (a duration from
    the backend's clock) bounds it.
    """
    value = to_json_value(input, f"input of workflow {workflow.name!r}", "input")
    deadline_at = None if deadline is None else backend.now() + parse_duration(deadline)
    started, _ = backend.insert_run(
        workflow_name=workflow.name,
        version=workflow.version,
        input=value,
        available_at=None,
        deadline_at=deadline_at,
        idempotency_key=idempotency_key,
        flow=workflow.flow_fields(value),
    )
    return started.id


DRAIN_LIMIT = 1_000
"""Slices one :func:`drain` executes at most: more means some run keeps coming due."""


def drain(
    backend: InMemoryBackend,
    *,
    worker_id: str = "memory-worker",
    lease: timedelta | None = None,
    limit: int = DRAIN_LIMIT,
) -> list[SliceResult]:
    """Execute every due run of ``backend`` on this thread, a slice at a time, until none is due; the slices.

    Each run is claimed as a worker claims it (highest priority first, then
    oldest, from every queue) for ``worker_id``, with ``lease`` (default
    ``OPENWORKFLOW["LEASE"]``), and executed through the
    :class:`~django_openworkflow.worker.runner.SliceRunner` the workers use,
    with a lease that always holds. Children and successors are due at once,
    so they are executed too, and a parent they wake after them.

    Time does not move: a run that sleeps, backs off before a retry or waits
    stays parked. Move the backend's :class:`Clock` (or send the signal) and
    drain again::

        clock = Clock()
        backend = InMemoryBackend(clock=clock)
        run_id = start(backend, onboard_user, {"email": "ada@example.com"})
        drain(backend)                 # runs up to the sleep of a day
        clock.advance("1d")
        drain(backend)                 # and on to the end
        assert backend.run_outcome(run_id).status == "completed"

    Raises :class:`~django_openworkflow.testing.DrainError` after ``limit``
    slices. No database is touched: the in-memory backend is the only store.
    """
    from ..conf import owf_settings
    from ..engine.watchdog import watchdog
    from ..worker.runner import SliceRunner
    from . import DrainError

    runner = SliceRunner(backend, logging.getLogger("django_openworkflow.testing"))
    held_for = owf_settings.lease if lease is None else lease
    done: list[SliceResult] = []
    # Like testing.drain: no watchdog thread writes a slow step's start meanwhile, so journals do not
    # depend on how long steps took.
    with watchdog.off_on_this_thread():
        while True:
            with backend.lock:
                queues = sorted({run.queue for run in backend.runs.values() if run.is_claimable}) or [DEFAULT_QUEUE]
            claimed = backend.claim(worker_id, 1, held_for, queues)
            if not claimed:
                return done
            if len(done) >= limit:
                raise DrainError(f"{limit} slices executed and runs are still due (a loop that never ends?)")
            done.append(runner.run(claimed[0], _always))


def _always() -> bool:
    return True
