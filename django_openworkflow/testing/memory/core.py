"""What every group of the in-memory backend's operations stands on: its tables, lock, clock and fence."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ... import tracing
from ...definitions.children import ParentClosePolicy
from ...states import RunStatus, StepStatus
from ...store.fence import PARENT_CLOSED
from ...store.records import (
    AttemptUpdate,
    AttributeWrite,
    CancelRequested,
    ChildStart,
    Fence,
    LeaseLost,
    NewAttempt,
    Pending,
    ProgressWrite,
    RunRecord,
)

if TYPE_CHECKING:
    pass
from .rows import RUN_COLUMNS, ApprovalRow, AttemptRow, EventRow, RunRow, SignalRow, _Fenced, _read, _spawns, _stored


class MemoryCore:
    """The in-memory backend's tables and the helpers every group of operations uses.

    Thread safety: every table below, and the id counters, are guarded by
    :attr:`lock`. Each public operation holds it from start to end (it is
    reentrant: an event's starts insert runs inside the event's operation),
    so an operation is atomic and isolated like the database backends'
    transactions, and a check it makes (the fence) stays true until it has
    written. An atomic step's own code runs outside the lock. Tests that read
    or change the tables directly hold the lock too.
    """

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        """``clock``: the store's clock (aware UTC); by default this process's."""
        self._clock = clock or (lambda: datetime.now(UTC))
        self.lock = threading.RLock()
        # The tables, in insertion (= id) order; all guarded by self.lock.
        self.runs: dict[uuid.UUID, RunRow] = {}
        self.attempts: dict[int, AttemptRow] = {}
        self.signals: dict[int, SignalRow] = {}
        self.events: dict[int, EventRow] = {}
        self.approvals: dict[int, ApprovalRow] = {}
        # What runs publish and stream (ctx.publish, ctx.stream): key -> (position, value), and each stream's chunks.
        self.published: dict[tuple[uuid.UUID, str], tuple[int, Any]] = {}
        self.chunks: dict[tuple[uuid.UUID, str], list[Any]] = {}
        # Attributes ctx.set_attribute set: (run, name) -> (position, value).
        self.attributes: dict[tuple[uuid.UUID, str], tuple[int, Any]] = {}
        self._attempt_ids = itertools.count(1)
        self._signal_ids = itertools.count(1)
        self._event_ids = itertools.count(1)
        self._approval_ids = itertools.count(1)

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

    def open_connection(self) -> None:
        """No connection to open."""

    def connection_room(self) -> None:
        """No connection to count."""
        return None

    def check(self) -> list[Any]:
        """No database settings to check."""
        return []

    # -- the clock --

    def now(self) -> datetime:
        """The store's clock, aware UTC."""
        return self._clock().astimezone(UTC)

    # -- the fence and its building blocks (all called with the lock held) --

    def _fence(self, fence: Fence) -> RunRow:
        """The run, if the fence's ``worker_id`` holds it; else LeaseLost. Writes nothing.

        With ``unless_canceling``, a run whose cancel was requested raises
        :class:`CancelRequested` (the caller keeps the completions it carried).
        """
        run = self.runs.get(fence.run_id)
        if run is None or not run.is_held or run.worker_id != fence.worker_id:
            raise LeaseLost(fence.run_id)
        if fence.unless_canceling and run.cancel_requested_at is not None:
            raise CancelRequested(fence.run_id)
        return run

    def _fence_keeping_completions(self, fence: Fence) -> RunRow:
        """The fence of a write that may be refused for a cancel request: then write the completions it carried.

        The steps that finished stay in the journal, so they are compensated;
        children not started yet are dropped with the rest of the write.
        """
        try:
            return self._fence(fence)
        except CancelRequested:
            run = self._fence(replace(fence, unless_canceling=False))
            self._update(run, fence.now)
            self._flush(fence.run_id, [change for change in fence.pending if not _spawns(change)], fence.now)
            raise

    def _commit(self, fence: Fence, fenced: _Fenced) -> int | None:
        """``pending``, new attempts, run fields, a child start and wake-ups in one fenced operation.

        The order of ``JournalOps._commit``: the plain pending attempts, then
        those starting children, then ``insert``, then ``inserts`` (ids ascend
        in that order); then the parent's wake-up, the check of finished
        children, and the child linked to the new attempt.
        """
        run_id, now = fence.run_id, fence.now
        with self.lock:
            run = self._fence_keeping_completions(fence)
            run_fields = dict(fenced.run_fields)
            self._update(run, now, **run_fields)
            self._flush(run_id, fence.pending, now)
            new_id = self._insert_attempt(run_id, fenced.insert, now) if fenced.insert is not None else None
            for new in fenced.inserts:
                self._insert_attempt(run_id, new, now)
            if fenced.close_children:
                self.close_children([run_id], now)
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
            elif isinstance(change, ProgressWrite):
                self._write_progress(run_id, change)
            elif isinstance(change, AttributeWrite):
                stored = self.attributes.get((run_id, change.name))
                if stored is None or stored[0] < change.position:  # as store/attributes.py
                    self.attributes[(run_id, change.name)] = (change.position, change.value)
        for change in pending:
            if isinstance(change, NewAttempt) and change.child is None:
                self._insert_attempt(run_id, change, now)
        for change in pending:
            if isinstance(change, NewAttempt) and change.child is not None:
                self._insert_attempt(run_id, change, now)

    def _write_progress(self, run_id: Any, item: ProgressWrite) -> None:
        """As ``store/progress.py``: a chunk already at its offset, or a value of an earlier position, is dropped."""
        if item.stream is not None:
            chunks = self.chunks.setdefault((run_id, item.stream), [])
            if item.position == len(chunks):
                chunks.append(_stored(item.value))
            return
        stored = self.published.get((run_id, item.name))
        if stored is None or stored[0] < item.position:
            self.published[(run_id, item.name)] = (item.position, _stored(item.value))

    def published_values(self, run_id: Any) -> dict[str, Any]:
        """Every key the run published, with its latest value (``store.progress.published_values``)."""
        with self.lock:
            found = {key: _read(value) for (run, key), (_, value) in self.published.items() if run == run_id}
        return dict(sorted(found.items()))

    def run_attributes(self, run_id: Any) -> dict[str, Any]:
        """The attributes the run set, by name (``store.attributes.run_attributes``)."""
        with self.lock:
            found = {name: value for (run, name), (_, value) in self.attributes.items() if run == run_id}
        return dict(sorted(found.items()))

    def read_chunks(self, run_id: Any, stream: str, offset: int = 0) -> list[tuple[int, Any]]:
        """The chunks of ``stream`` from ``offset`` on, as ``(offset, data)`` (``store.progress.read_chunks``)."""
        with self.lock:
            chunks = self.chunks.get((run_id, stream), [])[offset:]
            return [(offset + index, _read(data)) for index, data in enumerate(chunks)]

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
        if child.closes_with is not None:
            self.runs[child.closes_with].closes_children = True
        return child.id

    def close_children(self, run_ids: list[Any], now: datetime) -> list[Any]:
        """Apply the parent-close policy of the unfinished children of runs ending now (``FenceOps.close_children``)."""
        canceled: list[Any] = []
        closing = set(run_ids)
        while closing:
            children = [run for run in self.runs.values() if run.closes_with in closing and run.is_claimable]
            ends = [
                run
                for run in children
                if run.parent_close_policy == ParentClosePolicy.TERMINATE
                or (run.parent_close_policy == ParentClosePolicy.REQUEST_CANCEL and run.started_at is None)
            ]
            for run in children:
                if run in ends:
                    self._update(run, now, status=RunStatus.CANCELED, worker_id=None, finished_at=now)
                    run.error = _stored(PARENT_CLOSED)
                elif run.parent_close_policy == ParentClosePolicy.REQUEST_CANCEL and run.cancel_requested_at is None:
                    self._update(run, now, cancel_requested_at=now)
                    if run.worker_id is None:
                        run.available_at = now
            self._close_open_steps([run.id for run in ends], now)
            canceled += [run.id for run in ends]
            closing = {run.id for run in ends}
        return canceled

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
            closes_children=run.closes_children,
        )

    # -- driving runs on an in-memory backend: a clock to move, a start, a drain --

    # -- used by more than one group of operations --

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

    def _parent_id(self, run: RunRow) -> Any:
        attempt = self.attempts.get(run.parent_step_attempt_id) if run.parent_step_attempt_id else None
        return attempt.workflow_run_id if attempt is not None else None

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
