"""Creating, reading and canceling runs (the client's and admin's side)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from ..models import CLAIMABLE_STATUSES, RunStatus, WorkflowRun
from .db import alias, db_now, fetch_db_now
from .journal import wake_parent


def insert_run(
    *,
    workflow_name: str,
    version: str | None,
    input: Any,
    available_at: datetime | None,
    deadline_at: datetime | None,
    idempotency_key: str | None,
    parent_step_attempt_id: int | None = None,
) -> tuple[WorkflowRun, bool]:
    """Insert a pending run; returns (run, created).

    With an idempotency key the unique constraint decides: a concurrent or
    earlier start with the same (workflow name, key) returns that run instead.
    """
    using = alias()
    fields = dict(
        workflow_name=workflow_name,
        version=version,
        status=RunStatus.PENDING,
        input=input,
        available_at=available_at if available_at is not None else db_now(using=using),
        deadline_at=deadline_at,
        idempotency_key=idempotency_key,
        parent_step_attempt_id=parent_step_attempt_id,
    )
    manager = WorkflowRun.objects.using(using)
    if idempotency_key is None:
        return manager.create(**fields), True
    try:
        with transaction.atomic(using=using):
            return manager.create(**fields), True
    except IntegrityError:
        existing = manager.filter(workflow_name=workflow_name, idempotency_key=idempotency_key).first()
        if existing is None:  # the clashing row was rolled back meanwhile
            return manager.create(**fields), True
        return existing, False


def get_run(run_id: Any) -> WorkflowRun | None:
    return WorkflowRun.objects.using(alias()).filter(id=run_id).first()


def cancel_run(run_id: Any) -> bool:
    """Cancel a run that has not finished; False if it already had.

    A parent waiting on the run is woken so that its wait step fails.
    """
    using = alias()
    now = fetch_db_now(using)
    with transaction.atomic(using=using):
        canceled = (
            WorkflowRun.objects.using(using)
            .filter(id=run_id, status__in=CLAIMABLE_STATUSES)
            .update(status=RunStatus.CANCELED, worker_id=None, finished_at=now, updated_at=now)
        )
        if canceled:
            parent_step = WorkflowRun.objects.using(using).filter(id=run_id).values_list("parent_step_attempt_id", flat=True).first()
            if parent_step is not None:
                wake_parent(parent_step, now)
    return bool(canceled)
