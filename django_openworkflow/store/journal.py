"""The journal: a run's history, and the fenced writes a worker makes while it holds the run.

Every write goes through :meth:`JournalOps._commit` (or, for waits and
atomic steps, a transaction that starts the same way): one short
transaction that first re-checks that this worker still holds the run
(``worker_id`` and status ``running``). A worker that lost its lease, or
whose run was canceled, gets :class:`LeaseLost` and writes nothing.

A write that would start something new or end the run is refused the same
way when someone asked to cancel the run after its compensations
(``cancel_requested_at``, ``compensate_on_cancel``): it writes only the
completions it carries and raises :class:`CancelRequested`. The fence's
own UPDATE asks, so a step boundary costs no extra statement; however
short the step that ran meanwhile, no request is missed.

The operations the engine calls are named for what they do to the run
(record a step, park, complete, fail, reschedule); they raise
:class:`StoreUnavailable` instead of a database error, so user code cannot
swallow it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from typing import Any, NoReturn, ParamSpec, TypeVar

from django.db import DatabaseError, connections, transaction
from django.db.models import Q

from .. import tracing
from ..errors import StepUsageError
from ..models import Signal, StepAttempt, WorkflowRun
from ..states import RunStatus, StepStatus
from .core import BackendCore
from .records import (
    AttemptRecord,
    AttemptUpdate,
    CancelRequested,
    ChildStart,
    ClaimedRun,
    DeliveredSignal,
    LeaseLost,
    NewAttempt,
    Pending,
    RunOutcome,
    StoreUnavailable,
)

logger = logging.getLogger("django_openworkflow.store")

P = ParamSpec("P")
T = TypeVar("T")

ATTEMPT_RECORD_FIELDS = ("id", "step_name", "kind", "status", "output", "error", "context", "child_workflow_run_id")


def engine_op(method: Callable[P, T]) -> Callable[P, T]:
    """An operation the engine calls: a database error becomes :class:`StoreUnavailable`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except DatabaseError as exc:
            raise StoreUnavailable(str(exc)) from exc

    return wrapper


class JournalOps(BackendCore):
    """Reading a run's history and writing its steps and outcome, fenced on the worker that holds it."""

    @engine_op
    def load_history(self, run_id: Any) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first, in one query."""
        rows = StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id").values_list(*ATTEMPT_RECORD_FIELDS)
        return [AttemptRecord(*row) for row in rows]

    # -- fenced writes, by intent --

    @engine_op
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
        """Commit ``pending`` and record that a step started; returns the new attempt's id.

        ``unless_canceling`` (on every write that starts something or ends the
        run): refused with :class:`CancelRequested` once the run's cancel was
        requested, after writing the completions in ``pending``.
        """
        new_id = self._commit(run_id, worker_id, now, pending, insert=attempt, unless_canceling=unless_canceling)
        assert new_id is not None
        return new_id

    @engine_op
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
        """Commit ``pending`` and record that several steps started (a parallel group); returns their ids."""
        self._commit(run_id, worker_id, now, pending, inserts=attempts, unless_canceling=unless_canceling)
        ids = [attempt.id for attempt in attempts if attempt.id is not None]
        assert len(ids) == len(attempts), "every inserted attempt has its id"
        return ids

    @engine_op
    def flush(
        self, run_id: Any, worker_id: str, now: datetime, pending: Pending, *, unless_canceling: bool = False
    ) -> None:
        """Commit ``pending`` alone: parallel steps that finished while others still run, or children's starts."""
        self._commit(run_id, worker_id, now, pending, unless_canceling=unless_canceling)

    @engine_op
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
        """Let go of the run until ``until``: a sleep, a wait for a child, or a step's retry backoff.

        ``attempt`` records the step that parks (a sleep or a wait);
        ``child`` starts a child run linked to it, in the same transaction.
        A parent that parks on ``wake_if_child_done`` (child run ids) is due
        at once if one of those children has already finished. ``wake_on_attempt`` (a child's step
        attempt) lets only that child's end wake the run early, so a parent
        waiting for 300 children is not woken 300 times; without it, any
        child's end does.
        """
        self._commit(
            run_id,
            worker_id,
            now,
            pending,
            insert=attempt,
            run_fields={"worker_id": None, "available_at": until, "wake_on_attempt_id": wake_on_attempt},
            start_child=child,
            wake_when_child_done=wake_if_child_done,
            unless_canceling=unless_canceling,
        )

    @engine_op
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
        fields = {"status": RunStatus.COMPLETED, "output": output, "error": None, "finished_at": now}
        self._commit(
            run_id,
            worker_id,
            now,
            pending,
            run_fields=fields,
            wake_parent_of=parent_step_id,
            unless_canceling=unless_canceling,
        )

    @engine_op
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
        fields: dict[str, Any] = {"status": RunStatus.FAILED, "error": error, "finished_at": now}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(
            run_id, worker_id, now, pending, run_fields=fields, wake_parent_of=parent_step_id, ended_badly=True
        )

    @engine_op
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
        with self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(run_id, worker_id, now, {"status": RunStatus.CANCELED, "error": error, "finished_at": now})
            self._flush(run_id, pending, now)
            self._close_open_steps([run_id], now)
            if parent_step_id is not None:
                self.wake_parent(parent_step_id, now, ended_badly=True)

    @engine_op
    def is_canceled(self, run_id: Any) -> bool:
        """Whether the run was canceled, is being canceled (compensating), or is gone."""
        row = WorkflowRun.objects.filter(id=run_id).values_list("status", "cancel_requested_at").first()
        return row is None or row[0] == RunStatus.CANCELED or row[1] is not None

    @engine_op
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
        """Run the workflow again from the top at ``until``, keeping ``error`` as the reason.

        For a workflow-level retry (``attempts`` is the new count) and for a
        run this worker has no code for.
        """
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "error": error}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(run_id, worker_id, now, pending, run_fields=fields, unless_canceling=unless_canceling)

    @engine_op
    def clear_error(self, run_id: Any, worker_id: str, now: datetime) -> None:
        """Drop a note the run carried from an earlier slice (it is executing again)."""
        self._commit(run_id, worker_id, now, [], run_fields={"error": None})

    def release(
        self, claimed: ClaimedRun, retry_in: timedelta = timedelta(seconds=1), error: dict[str, Any] | None = None
    ) -> bool:
        """Hand a held run back after an error, so it is retried after ``retry_in`` rather than after its lease.

        ``error`` is kept on the run as a note for people and for the next
        slice. False when that failed too (the database is still away): the
        lease expires instead, and nothing is lost either way.
        """
        try:
            now = self.now()
            fields: dict[str, Any] = {"worker_id": None, "available_at": now + retry_in}
            if error is not None:
                fields["error"] = error
            self._commit(claimed.run.id, claimed.worker_id, now, [], run_fields=fields)
        except (Exception, LeaseLost):
            logger.debug("could not release run %s", claimed.run.id, exc_info=True)
            return False
        return True

    def _commit(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        *,
        insert: NewAttempt | None = None,
        inserts: list[NewAttempt] | None = None,
        run_fields: dict[str, Any] | None = None,
        start_child: ChildStart | None = None,
        wake_when_child_done: list[Any] | None = None,
        wake_parent_of: int | None = None,
        ended_badly: bool = False,
        unless_canceling: bool = False,
    ) -> int | None:
        """Write ``pending``, new attempts and run fields in one fenced transaction.

        ``start_child`` inserts a child run linked to the new attempt, so the
        child exists exactly when the parent's wait step does (so do the
        ``child`` of pending new attempts: ``ctx.step.start_workflow``);
        ``inserts`` are more new attempts whose ids the caller wants back
        (filled in on each); ``wake_parent_of`` (the finishing run's parent
        step attempt) wakes a parent parked on that very step. Returns the
        inserted attempt's id. Raises :class:`LeaseLost` (after writing
        nothing) when the worker no longer holds the run, and, with
        ``unless_canceling``, :class:`CancelRequested` (after writing only
        the completions in ``pending``) when the run's cancel was requested.
        """
        with self._keeping_completions(run_id, worker_id, now, pending, unless_canceling):
            return self._commit_held(
                run_id,
                worker_id,
                now,
                pending,
                insert=insert,
                inserts=inserts,
                run_fields=run_fields or {},
                start_child=start_child,
                wake_when_child_done=wake_when_child_done,
                wake_parent_of=wake_parent_of,
                ended_badly=ended_badly,
                unless_canceling=unless_canceling,
            )

    def _commit_held(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        *,
        insert: NewAttempt | None,
        inserts: list[NewAttempt] | None,
        run_fields: dict[str, Any],
        start_child: ChildStart | None,
        wake_when_child_done: list[Any] | None,
        wake_parent_of: int | None,
        ended_badly: bool,
        unless_canceling: bool,
    ) -> int | None:
        spawning = [c for c in pending if isinstance(c, NewAttempt) and c.child is not None]
        if not (spawning or inserts or start_child or wake_when_child_done or wake_parent_of):
            return self._step_boundary(run_id, worker_id, now, pending, insert, run_fields, unless_canceling)
        with self.write_lock(), transaction.atomic(using=self.alias):
            if spawning or inserts:
                plain = [c for c in pending if not (isinstance(c, NewAttempt) and c.child is not None)]
                self._step_boundary(run_id, worker_id, now, plain, None, run_fields, unless_canceling)
                self._insert_attempts(run_id, [*spawning, *([insert] if insert else []), *(inserts or [])], now)
                new_id = insert.id if insert is not None else None
            else:
                new_id = self._step_boundary(run_id, worker_id, now, pending, insert, run_fields, unless_canceling)
            if wake_parent_of is not None:
                self.wake_parent(wake_parent_of, now, ended_badly)
            if wake_when_child_done and WorkflowRun.objects.finished().filter(id__in=wake_when_child_done).exists():
                WorkflowRun.objects.filter(id=run_id).update(available_at=now)
            if start_child is not None:
                assert new_id is not None, "a child starts with the step that waits for it"
                child = WorkflowRun.objects.create(
                    trace_context=tracing.current_context(),
                    workflow_name=start_child.workflow_name,
                    version=start_child.version,
                    input=start_child.input,
                    available_at=now,
                    **start_child.flow,
                    parent_step_attempt_id=new_id,
                )
                StepAttempt.objects.filter(id=new_id).update(child_workflow_run=child)
            return new_id

    @contextmanager
    def _keeping_completions(
        self, run_id: Any, worker_id: str, now: datetime, pending: Pending, unless_canceling: bool
    ) -> Iterator[None]:
        """Around a write refused for a cancel request: write the completions it carried, then re-raise.

        The steps that finished stay in the journal, so they are compensated;
        children not started yet (``start_workflow``) are dropped with the
        rest of what the write would have started. Fenced like any write.
        """
        try:
            yield
        except CancelRequested:
            if not unless_canceling:  # pragma: no cover - only a write that asked is refused
                raise
            kept = [c for c in pending if not (isinstance(c, NewAttempt) and c.child is not None)]
            with self.write_lock(), transaction.atomic(using=self.alias):
                self._fence(run_id, worker_id, now, {})
                self._flush(run_id, kept, now)
            raise

    def _step_boundary(
        self,
        run_id: Any,
        worker_id: str,
        now: datetime,
        pending: Pending,
        insert: NewAttempt | None,
        run_fields: dict[str, Any],
        unless_canceling: bool = False,
    ) -> int | None:
        """The hot path of :meth:`_commit`: fence, pending changes and a new attempt, nothing else.

        Its own transaction (a savepoint inside :meth:`_commit`'s, for the
        rarer writes around children). A few statements here; a backend may
        do it in one.
        """
        with self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(run_id, worker_id, now, run_fields, unless_canceling=unless_canceling)
            self._flush(run_id, pending, now)
            return self._insert_attempt(run_id, insert, now).id if insert is not None else None

    # -- signal and event waits --

    @engine_op
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
        """One fenced transaction for a signal or event wait; returns (new attempt id, consumed signal).

        Flushes ``pending`` and records a new wait (``insert``). A new signal
        wait takes the oldest buffered signal of its name: the wait completes
        now and the run does not park. Otherwise the run parks until
        ``park_until`` — unless a sender completed the wait meanwhile, in which
        case it is due at once. Senders lock the run row, and so does the fence
        here, so each delivery is seen by one side or the other.
        """
        with (
            self._keeping_completions(run_id, worker_id, now, pending, unless_canceling),
            self.write_lock(),
            transaction.atomic(using=self.alias),
        ):
            self._fence(run_id, worker_id, now, {}, unless_canceling=unless_canceling)
            if event_type is not None:
                self.lock_event_type(event_type)
            self._flush(run_id, pending, now)
            attempt_id = waiting_attempt_id
            if insert is not None:
                attempt_id = self._insert_attempt(run_id, insert, now).id
                if signal_name is not None:
                    signal = self._consume_signal(run_id, signal_name, attempt_id, now)
                    if signal is not None:
                        StepAttempt.objects.filter(id=attempt_id).update(
                            status=StepStatus.COMPLETED,
                            output={"signal_id": signal.id, "data": signal.data},
                            finished_at=now,
                        )
                        return attempt_id, signal
            assert attempt_id is not None, "a wait to record or to re-arm"
            delivered = StepAttempt.objects.filter(id=attempt_id).exclude(status=StepStatus.RUNNING).exists()
            WorkflowRun.objects.filter(id=run_id).update(worker_id=None, available_at=now if delivered else park_until)
            return (attempt_id if insert is not None else None), None

    def _consume_signal(self, run_id: Any, name: str, attempt_id: int, now: datetime) -> DeliveredSignal | None:
        """Inside a worker's fenced transaction: take the oldest buffered signal for a new wait."""
        row = (
            Signal.objects.filter(workflow_run_id=run_id, name=name, consumed_by__isnull=True)
            .order_by("id")
            .values_list("id", "data")
            .first()
        )
        if row is None:
            return None
        Signal.objects.filter(id=row[0]).update(consumed_by_id=attempt_id, consumed_at=now)
        return DeliveredSignal(*row)

    @engine_op
    def expire_wait(self, run_id: Any, worker_id: str, now: datetime, pending: Pending, *, attempt_id: int) -> Any:
        """Time out an open wait, fenced; returns None, or the output a sender delivered just before.

        The timeout is journaled (output ``{"timed_out": true}``), so a replay
        returns ``None`` again and a late signal stays buffered.
        """
        with self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(run_id, worker_id, now, {})
            self._flush(run_id, pending, now)
            expired = StepAttempt.objects.filter(id=attempt_id, status=StepStatus.RUNNING).update(
                status=StepStatus.COMPLETED, output={"timed_out": True}, finished_at=now
            )
            if expired:
                return None
            return StepAttempt.objects.filter(id=attempt_id).values_list("output", flat=True).first()

    # -- atomic steps --

    @contextmanager
    def atomic_step(
        self, run_id: Any, worker_id: str, clock: Callable[[], datetime], pending: Pending
    ) -> Iterator[Callable[[NewAttempt], None]]:
        """A transaction around a step's own code; yields ``record(attempt)`` for its journal entry.

        The fence is checked last, just before commit, so the run row is locked
        only briefly (heartbeats are not held up by a long step), and a worker
        that lost its lease meanwhile rolls back the step's writes with it.
        Writes to other database aliases are refused: they could not commit
        with the journal. An error of the step's own code propagates as it
        is; one of the journal's write or of the commit becomes
        :class:`StoreUnavailable`.
        """
        records: list[NewAttempt] = []
        in_step = False
        try:
            with ExitStack() as stack:
                stack.enter_context(self.write_lock())
                stack.enter_context(transaction.atomic(using=self.alias))
                for other in connections:
                    if other != self.alias:
                        stack.enter_context(connections[other].execute_wrapper(_refuse_writes(other, self.alias)))
                in_step = True
                yield records.append
                in_step = False
                now = clock()
                self._fence(run_id, worker_id, now, {})
                self._flush(run_id, pending, now)
                for new in records:
                    self._insert_attempt(run_id, new, now)
        except DatabaseError as exc:
            if in_step:
                raise  # the step's own code failed: its writes are rolled back
            raise StoreUnavailable(str(exc)) from exc

    # -- reads the engine makes --

    @engine_op
    def run_outcome(self, run_id: Any) -> RunOutcome | None:
        """A run's status, output and error (None if the row is gone)."""
        row = WorkflowRun.objects.filter(id=run_id).values_list("status", "output", "error", "finished_at").first()
        return RunOutcome(*row) if row is not None else None

    @engine_op
    def run_outcomes(self, run_ids: list[Any]) -> dict[Any, RunOutcome]:
        """The status, output and error of several runs, by id, in one query (missing rows are left out)."""
        rows = WorkflowRun.objects.filter(id__in=run_ids).values_list("id", "status", "output", "error", "finished_at")
        return {run_id: RunOutcome(status, output, error, finished) for run_id, status, output, error, finished in rows}

    @engine_op
    def successor_id(self, run_id: Any) -> Any:
        """The id of the run this one continued as (``ctx.continue_as_new``), or None."""
        return WorkflowRun.objects.filter(continued_from_id=run_id).values_list("id", flat=True).first()

    @engine_op
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
        """End the run as ``continued`` and start its successor with ``input``, in one transaction.

        The successor keeps the run's deadline, its retention and its place under a
        parent: a parent waiting on the run now waits on the successor.
        Returns the successor's id.
        """
        with (
            self._keeping_completions(run_id, worker_id, now, pending, unless_canceling),
            self.write_lock(),
            transaction.atomic(using=self.alias),
        ):
            fields = {"status": RunStatus.CONTINUED, "output": None, "error": None, "finished_at": now}
            self._fence(run_id, worker_id, now, fields, unless_canceling=unless_canceling)
            self._flush(run_id, pending, now)
            name, deadline, parent_step, retention = (
                WorkflowRun.objects.filter(id=run_id)
                .values_list("workflow_name", "deadline_at", "parent_step_attempt_id", "retention")
                .get()
            )
            successor = WorkflowRun.objects.create(
                trace_context=tracing.current_context(),
                workflow_name=name,
                version=version,
                input=input,
                available_at=now,
                deadline_at=deadline,
                parent_step_attempt_id=parent_step,
                continued_from_id=run_id,
                **{**flow, "retention": retention},  # the successor is the same logical run: same retention
            )
            if parent_step is not None:
                StepAttempt.objects.filter(id=parent_step).update(child_workflow_run=successor)
            return successor.id

    def holds_lease(self, run_id: Any, worker_id: str) -> bool:
        """Whether ``worker_id`` holds the run and its lease has not run out by the database's clock.

        One query, for step code (``ctx.lease_held(check=True)``): a database
        error is raised as it is, the step's own.
        """
        held = WorkflowRun.objects.held().filter(id=run_id, worker_id=worker_id, available_at__gt=self.now_expr())
        return held.exists()

    @engine_op
    def run_status(self, run_id: Any) -> str | None:
        """The run's current status (None if the row is gone)."""
        return WorkflowRun.objects.filter(id=run_id).values_list("status", flat=True).first()

    # -- building blocks, inside a transaction --

    def _fence(
        self, run_id: Any, worker_id: str, now: datetime, run_fields: dict[str, Any], *, unless_canceling: bool = False
    ) -> None:
        """Lock the run row if this worker still holds it (and write ``run_fields``); else LeaseLost.

        With ``unless_canceling`` the same UPDATE also requires that nobody
        asked to cancel the run; when it matches nothing, :meth:`_refused`
        tells a cancel request (:class:`CancelRequested`) from a lost lease.
        """
        held = WorkflowRun.objects.held().filter(id=run_id, worker_id=worker_id)
        if unless_canceling:
            held = held.filter(cancel_requested_at__isnull=True)
        if not held.update(updated_at=now, **run_fields):
            self._refused(run_id, worker_id, now, unless_canceling)

    def _refused(self, run_id: Any, worker_id: str, now: datetime, unless_canceling: bool) -> NoReturn:
        """The fence matched nothing: raise :class:`CancelRequested` if this worker holds the run, else LeaseLost.

        Only when the fence asked about a cancel request. Inside a
        transaction the UPDATE's row lock keeps the answer true until it
        ends; in autocommit (PostgreSQL's one-statement step boundary) it may
        be stale at once, which is safe: the completions are written by
        :meth:`_keeping_completions`, fenced again.
        """
        held = WorkflowRun.objects.held().filter(id=run_id, worker_id=worker_id)
        if unless_canceling and held.update(updated_at=now):
            raise CancelRequested(run_id)
        raise LeaseLost(run_id)

    def _flush(self, run_id: Any, pending: Pending, now: datetime) -> None:
        spawning = []
        for change in pending:
            if not isinstance(change, NewAttempt):
                self._finish_attempt(change)
            elif change.child is not None:
                spawning.append(change)
            else:
                self._insert_attempt(run_id, change, now)
        if spawning:
            self._insert_attempts(run_id, spawning, now)

    def _close_open_steps(self, run_ids: list[Any], now: datetime) -> None:
        """A canceled run's sleep, wait or executing step ends with it, so no step shows "running" forever."""
        StepAttempt.objects.filter(workflow_run_id__in=run_ids, status=StepStatus.RUNNING).update(
            status=StepStatus.FAILED, error={"type": "Canceled", "message": "the run was canceled"}, finished_at=now
        )

    def _finish_attempt(self, change: AttemptUpdate) -> None:
        StepAttempt.objects.filter(id=change.attempt_id).update(
            status=change.status, output=change.output, error=change.error, finished_at=change.finished_at
        )

    def _insert_attempts(self, run_id: Any, news: list[NewAttempt], now: datetime) -> None:
        """Insert attempts in a few statements, fill in their ids, and start the children they carry."""
        rows = [self._attempt(run_id, new, now) for new in news]
        self.insert_with_ids(rows)
        for new, row in zip(news, rows, strict=True):
            new.id = row.id
        spawned = [new for new in news if new.child is not None]
        if not spawned:
            return
        children = []
        trace_context = tracing.current_context()  # the parent's slice: its children join its trace
        for new in spawned:
            start = new.child
            assert start is not None
            children.append(
                WorkflowRun(
                    trace_context=trace_context,
                    workflow_name=start.workflow_name,
                    version=start.version,
                    input=start.input,
                    available_at=now,
                    **start.flow,
                    parent_step_attempt_id=new.id,
                )
            )
            new.child_run_id = children[-1].id
        WorkflowRun.objects.bulk_create(children)
        links = [StepAttempt(id=new.id, child_workflow_run_id=new.child_run_id) for new in spawned]
        StepAttempt.objects.bulk_update(links, ["child_workflow_run"])

    def _attempt(self, run_id: Any, new: NewAttempt, now: datetime) -> StepAttempt:
        return StepAttempt(
            workflow_run_id=run_id,
            step_name=new.step_name,
            kind=new.kind,
            status=new.status,
            started_at=new.started_at,
            context=new.context,
            output=new.output,
            error=new.error,
            finished_at=new.finished_at,
            created_at=now,
        )

    def _insert_attempt(self, run_id: Any, new: NewAttempt, now: datetime) -> StepAttempt:
        row = self._attempt(run_id, new, now)
        row.save(using=self.alias, force_insert=True)
        return row

    def wake_parent(self, parent_step_attempt_id: int, now: Any, ended_badly: bool = False) -> int:
        """Make a parent run due now if it is parked waiting on this step attempt.

        A parent that is executing (it holds its lease) is left alone: it will
        see the child's state when it next reads it. A parent watching one
        child of many (``wake_on_attempt_id``) is woken by that child, or by
        any child that failed or was canceled.

        A parent that is held may be parking at this very moment, its park
        not yet committed: an update skips such a row without waiting (its
        committed version is not parked), and the park's own check of the
        child ran before this child's end committed, so each would miss the
        other and the parent would sleep until its wait times out. So the
        parent's state is read first: a held parent's row is locked (which
        waits for a park in progress to commit) before the update; a parked
        parent that watches another child is left alone, without a write.
        Siblings finishing while their parent is parked take no lock, so
        they do not queue behind each other.
        """
        waiting = StepAttempt.objects.filter(id=parent_step_attempt_id, status=StepStatus.RUNNING)
        parent = WorkflowRun.objects.filter(id__in=waiting.values("workflow_run_id"))
        state = parent.values_list("worker_id", "status", "wake_on_attempt_id").first()
        if state is None:
            return 0
        worker_id, status, watched = state
        if worker_id is not None:
            list(parent.select_for_update().values_list("id", flat=True))
        elif status != RunStatus.RUNNING or not (ended_badly or watched in (None, parent_step_attempt_id)):
            return 0  # finished, pending, or parked watching another child: nothing to wake
        parents = parent.parked().filter(available_at__gt=now)
        if not ended_badly:  # a failed or canceled child wakes its parent even if it watches another
            parents = parents.filter(Q(wake_on_attempt_id__isnull=True) | Q(wake_on_attempt_id=parent_step_attempt_id))
        return parents.update(available_at=now)


def _refuse_writes(other: str, using: str) -> Callable[..., Any]:
    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if verb not in ("SELECT", "SHOW", "EXPLAIN", "SET"):
            raise StepUsageError(
                f"an atomic step wrote to database {other!r}, but only writes to {using!r} (the workflow "
                "database) commit with the journal; write to it, or use a step without atomic=True"
            )
        return execute(sql, params, many, context)

    return wrapper
