"""The journal: load a run's history, write step attempts and run results, fenced.

Every write for a run goes through :func:`commit`, one short transaction
that first re-checks that this worker still holds the run (``worker_id``
and status ``running``). A worker that lost its lease, or whose run was
canceled, gets :class:`LeaseLost` and writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

from django.db import connections, transaction

from ..errors import StepUsageError
from ..models import FINISHED_STATUSES, RunStatus, Signal, StepAttempt, StepStatus, WorkflowRun
from . import pg, signals
from .db import alias, write_lock
from .records import AttemptUpdate, ChildStart, NewAttempt


class LeaseLost(BaseException):
    """This worker no longer holds the run (lease taken over, run canceled or deleted).

    A ``BaseException`` so that it unwinds user code like a suspension does.
    """


def load_history(run_id: Any) -> list[StepAttempt]:
    """Every attempt of the run, oldest first, in one query."""
    return list(StepAttempt.objects.using(alias()).filter(workflow_run_id=run_id).order_by("id"))


def commit(
    run_id: Any,
    worker_id: str,
    now: datetime,
    *,
    pending: list[AttemptUpdate | NewAttempt] = (),  # type: ignore[assignment]
    insert: NewAttempt | None = None,
    run_fields: dict[str, Any] | None = None,
    start_child: ChildStart | None = None,
    wake_when_child_done: Any = None,
    wake_parent_of: int | None = None,
) -> int | None:
    """Write buffered attempt changes, an optional new attempt and run fields in one fenced transaction.

    ``pending`` holds finished attempts: updates of rows already written
    and whole rows for attempts that were never recorded as started.

    ``start_child`` inserts a child run linked to the new attempt, so the
    child exists exactly when the parent's wait step does. A parent that
    parks on ``wake_when_child_done`` is made due at once if that child has
    already finished; ``wake_parent_of`` (the finishing run's parent step
    attempt) wakes a parent parked on that very step.

    Returns the inserted attempt's id. Raises :class:`LeaseLost` (after
    writing nothing) when the worker no longer holds the run.
    """
    using = alias()
    vendor = connections[using].vendor
    if vendor == "postgresql" and start_child is None and wake_when_child_done is None and wake_parent_of is None:
        new_id = pg.commit(using, run_id, worker_id, now, list(pending), insert, run_fields or {})
        if new_id == -1:
            raise LeaseLost(run_id)
        return new_id
    with write_lock(using), transaction.atomic(using=using):
        _fence(using, run_id, worker_id, now, run_fields or {})
        _flush(using, run_id, pending, now)
        if wake_parent_of is not None:
            wake_parent(wake_parent_of, now)
        if wake_when_child_done is not None and (
            WorkflowRun.objects.using(using).filter(id=wake_when_child_done, status__in=FINISHED_STATUSES).exists()
        ):
            WorkflowRun.objects.using(using).filter(id=run_id).update(available_at=now)
        if insert is None:
            return None
        attempt = _insert_attempt(using, run_id, insert, now)
        if start_child is not None:
            child = WorkflowRun.objects.using(using).create(
                workflow_name=start_child.workflow_name,
                version=start_child.version,
                input=start_child.input,
                available_at=now,
                parent_step_attempt=attempt,
            )
            StepAttempt.objects.using(using).filter(id=attempt.id).update(child_workflow_run=child)
        return attempt.id


def wait_for_delivery(
    run_id: Any,
    worker_id: str,
    now: datetime,
    *,
    pending: list[AttemptUpdate | NewAttempt],
    park_until: datetime,
    insert: NewAttempt | None = None,
    waiting_attempt_id: int | None = None,
    signal_name: str | None = None,
    event_type: str | None = None,
) -> tuple[int | None, Signal | None]:
    """One fenced transaction for a signal or event wait; returns (new attempt id, consumed signal).

    Flushes ``pending`` and records a new wait (``insert``). A new signal
    wait takes the oldest buffered signal of its name: the wait completes
    now and the run does not park. Otherwise the run parks until
    ``park_until`` — unless a sender completed the wait meanwhile, in which
    case it is due at once. Senders lock the run row, and so does the fence
    here, so each delivery is seen by one side or the other.
    """
    using = alias()
    with write_lock(using), transaction.atomic(using=using):
        _fence(using, run_id, worker_id, now, {})
        if event_type is not None:
            signals.lock_event_type(using, event_type)
        _flush(using, run_id, pending, now)
        attempt_id = waiting_attempt_id
        if insert is not None:
            attempt_id = _insert_attempt(using, run_id, insert, now).id
            if signal_name is not None:
                signal = signals.consume_signal(using, run_id, signal_name, attempt_id, now)
                if signal is not None:
                    StepAttempt.objects.using(using).filter(id=attempt_id).update(
                        status=StepStatus.COMPLETED,
                        output={"signal_id": signal.id, "data": signal.data},
                        finished_at=now,
                    )
                    return attempt_id, signal
        assert attempt_id is not None, "a wait to record or to re-arm"
        delivered = StepAttempt.objects.using(using).filter(id=attempt_id).exclude(status=StepStatus.RUNNING).exists()
        WorkflowRun.objects.using(using).filter(id=run_id).update(
            worker_id=None, available_at=now if delivered else park_until
        )
        return (attempt_id if insert is not None else None), None


def expire_wait(
    run_id: Any, worker_id: str, now: datetime, *, pending: list[AttemptUpdate | NewAttempt], attempt_id: int
) -> Any:
    """Time out an open wait, fenced; returns None, or the output a sender delivered just before.

    The timeout is journaled (output ``{"timed_out": true}``), so a replay
    returns ``None`` again and a late signal stays buffered.
    """
    using = alias()
    with write_lock(using), transaction.atomic(using=using):
        _fence(using, run_id, worker_id, now, {})
        _flush(using, run_id, pending, now)
        expired = (
            StepAttempt.objects.using(using)
            .filter(id=attempt_id, status=StepStatus.RUNNING)
            .update(status=StepStatus.COMPLETED, output={"timed_out": True}, finished_at=now)
        )
        if expired:
            return None
        return StepAttempt.objects.using(using).filter(id=attempt_id).values_list("output", flat=True).first()


@contextmanager
def atomic_step(
    run_id: Any, worker_id: str, clock: Callable[[], datetime], pending: list[AttemptUpdate | NewAttempt]
) -> Iterator[Callable[[NewAttempt], None]]:
    """A transaction around a step's own code; yields ``record(attempt)`` for its journal entry.

    The fence is checked last, just before commit, so the run row is locked
    only briefly (heartbeats are not held up by a long step), and a worker
    that lost its lease meanwhile rolls back the step's writes with it.
    Writes to other database aliases are refused: they could not commit
    with the journal.
    """
    using = alias()
    records: list[NewAttempt] = []
    with ExitStack() as stack:
        stack.enter_context(write_lock(using))
        stack.enter_context(transaction.atomic(using=using))
        for other in connections:
            if other != using:
                stack.enter_context(connections[other].execute_wrapper(_refuse_writes(other, using)))
        yield records.append
        now = clock()
        _fence(using, run_id, worker_id, now, {})
        _flush(using, run_id, pending, now)
        for new in records:
            _insert_attempt(using, run_id, new, now)


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


def _fence(using: str, run_id: Any, worker_id: str, now: datetime, run_fields: dict[str, Any]) -> None:
    """Lock the run row if this worker still holds it (and write ``run_fields``); else LeaseLost."""
    held = (
        WorkflowRun.objects.using(using)
        .filter(id=run_id, worker_id=worker_id, status=RunStatus.RUNNING)
        .update(updated_at=now, **run_fields)
    )
    if not held:
        raise LeaseLost(run_id)


def _flush(using: str, run_id: Any, pending: list[AttemptUpdate | NewAttempt], now: datetime) -> None:
    for change in pending:
        if isinstance(change, NewAttempt):
            _insert_attempt(using, run_id, change, now)
        else:
            StepAttempt.objects.using(using).filter(id=change.attempt_id).update(
                status=change.status,
                output=change.output,
                error=change.error,
                finished_at=change.finished_at,
            )


def _insert_attempt(using: str, run_id: Any, new: NewAttempt, now: datetime) -> StepAttempt:
    return StepAttempt.objects.using(using).create(
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


def wake_parent(parent_step_attempt_id: int, now: Any) -> int:
    """Make a parent run due now if it is parked waiting on this step attempt.

    A parent that is executing (it holds its lease) is left alone: it will
    see the child's state when it next reads it.
    """
    using = alias()
    waiting = StepAttempt.objects.using(using).filter(id=parent_step_attempt_id, status=StepStatus.RUNNING)
    return (
        WorkflowRun.objects.using(using)
        .filter(
            id__in=waiting.values("workflow_run_id"),
            status=RunStatus.RUNNING,
            worker_id__isnull=True,
            available_at__gt=now,
        )
        .update(available_at=now)
    )


def run_outcome(run_id: Any) -> dict[str, Any] | None:
    """A run's status, output and error (None if the row is gone)."""
    row = WorkflowRun.objects.using(alias()).filter(id=run_id).values("status", "output", "error").first()
    return dict(row) if row is not None else None


def run_status(run_id: Any) -> str | None:
    """The run's current status (None if the row is gone)."""
    return WorkflowRun.objects.using(alias()).filter(id=run_id).values_list("status", flat=True).first()
