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

from ..models import RunStatus, StepAttempt, WorkflowRun
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
) -> StepAttempt | None:
    """Write attempt updates, an optional new attempt and run fields in one fenced transaction.

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
        if insert is None:
            return None
        return StepAttempt.objects.using(using).create(
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


def run_status(run_id: Any) -> str | None:
    """The run's current status (None if the row is gone)."""
    return (
        WorkflowRun.objects.using(alias()).filter(id=run_id).values_list("status", flat=True).first()
    )
