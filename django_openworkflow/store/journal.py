"""The journal: load a run's history, write step attempts and run results, fenced.

Every write for a run goes through :func:`commit`, one short transaction
that first re-checks that this worker still holds the run (``worker_id``
and status ``running``). A worker that lost its lease, or whose run was
canceled, gets :class:`LeaseLost` and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from ..models import FINISHED_STATUSES, RunStatus, StepAttempt, StepStatus, WorkflowRun
from .db import alias


class LeaseLost(BaseException):
    """This worker no longer holds the run (lease taken over, run canceled or deleted).

    A ``BaseException`` so that it unwinds user code like a suspension does.
    """


@dataclass
class AttemptUpdate:
    """Finish an attempt already in the journal."""

    attempt_id: int
    status: str
    finished_at: datetime
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass
class NewAttempt:
    """A step attempt to insert."""

    step_name: str
    kind: str
    status: str
    started_at: datetime
    context: dict[str, Any] | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    finished_at: datetime | None = None
    child_workflow_run_id: Any = None


@dataclass
class ChildStart:
    """A child run to insert, linked to the attempt inserted in the same transaction."""

    workflow_name: str
    version: str | None
    input: Any
    deadline_at: datetime | None = None


def load_history(run_id: Any) -> list[StepAttempt]:
    """Every attempt of the run, oldest first, in one query."""
    return list(StepAttempt.objects.using(alias()).filter(workflow_run_id=run_id).order_by("id"))


def commit(
    run_id: Any,
    worker_id: str,
    now: datetime,
    *,
    updates: list[AttemptUpdate] = (),  # type: ignore[assignment]
    insert: NewAttempt | None = None,
    run_fields: dict[str, Any] | None = None,
    start_child: ChildStart | None = None,
    wake_when_child_done: Any = None,
    wake_parent_of: int | None = None,
) -> StepAttempt | None:
    """Write attempt updates, an optional new attempt and run fields in one fenced transaction.

    ``start_child`` inserts a child run linked to the new attempt, so the
    child exists exactly when the parent's wait step does. A parent that
    parks on ``wake_when_child_done`` is made due at once if that child has
    already finished; ``wake_parent_of`` (the finishing run's parent step
    attempt) wakes a parent parked on that very step.

    Returns the inserted attempt. Raises :class:`LeaseLost` (after writing
    nothing) when the worker no longer holds the run.
    """
    using = alias()
    with transaction.atomic(using=using):
        held = (
            WorkflowRun.objects.using(using)
            .filter(id=run_id, worker_id=worker_id, status=RunStatus.RUNNING)
            .update(updated_at=now, **(run_fields or {}))
        )
        if not held:
            raise LeaseLost(run_id)
        for update in updates:
            StepAttempt.objects.using(using).filter(id=update.attempt_id).update(
                status=update.status,
                output=update.output,
                error=update.error,
                finished_at=update.finished_at,
            )
        if wake_parent_of is not None:
            wake_parent(wake_parent_of, now)
        if wake_when_child_done is not None and (
            WorkflowRun.objects.using(using).filter(id=wake_when_child_done, status__in=FINISHED_STATUSES).exists()
        ):
            WorkflowRun.objects.using(using).filter(id=run_id).update(available_at=now)
        if insert is None:
            return None
        attempt = StepAttempt.objects.using(using).create(
            workflow_run_id=run_id,
            step_name=insert.step_name,
            kind=insert.kind,
            status=insert.status,
            started_at=insert.started_at,
            context=insert.context,
            output=insert.output,
            error=insert.error,
            finished_at=insert.finished_at,
            child_workflow_run_id=insert.child_workflow_run_id,
        )
        if start_child is not None:
            child = WorkflowRun.objects.using(using).create(
                workflow_name=start_child.workflow_name,
                version=start_child.version,
                input=start_child.input,
                deadline_at=start_child.deadline_at,
                available_at=now,
                parent_step_attempt=attempt,
            )
            attempt.child_workflow_run = child
            StepAttempt.objects.using(using).filter(id=attempt.id).update(child_workflow_run=child)
        return attempt


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
    return (
        WorkflowRun.objects.using(alias()).filter(id=run_id).values("status", "output", "error").first()
    )


def run_status(run_id: Any) -> str | None:
    """The run's current status (None if the row is gone)."""
    return (
        WorkflowRun.objects.using(alias()).filter(id=run_id).values_list("status", flat=True).first()
    )
