"""A re-run from a step: the new run and the journal rows it copies, written in one transaction."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..models import StepAttempt
from ..states import StepStatus
from .backends.base import Backend

COPIED_FIELDS = ("step_name", "kind", "output", "context", "started_at", "finished_at")
"""What a copied row keeps of its source: the step, its result and when it ran (never a child run)."""


def source_journal(run_id: Any) -> list[StepAttempt]:
    """The journal of the run to re-run, oldest first, with what a copy needs (one query)."""
    fields = ("id", "status", "error", *COPIED_FIELDS)
    return list(StepAttempt.objects.filter(workflow_run_id=run_id).only(*fields).order_by("id"))


def insert_rerun(backend: Backend, fields: dict[str, Any], copies: list[StepAttempt]) -> Any:
    """Insert a pending run of ``fields`` with ``copies`` (completed source rows) as its journal; its id.

    One transaction: a worker never claims the run before its copied steps
    are there. Each copy keeps the source row's id in ``copied_from``, and
    the rows keep their order.
    """
    with backend.write_lock(), transaction.atomic(using=backend.alias):
        started = backend.insert_runs([fields])
        new_id = started[0][0]
        StepAttempt.objects.bulk_create(
            [
                StepAttempt(
                    workflow_run_id=new_id,
                    status=StepStatus.COMPLETED,
                    copied_from=source.id,
                    **{name: getattr(source, name) for name in COPIED_FIELDS},
                )
                for source in copies
            ]
        )
    return new_id
