"""Claiming due runs, heartbeats: the queue side of the runs table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models.functions import Coalesce

from ..models import CLAIMABLE_STATUSES, RunStatus, WorkflowRun
from .db import alias, db_now, fetch_db_now


@dataclass
class ClaimedRun:
    """A run this worker now holds, with the database time of the claim."""

    run: WorkflowRun
    worker_id: str
    claimed_at: datetime
    claimed_monotonic: float = field(default_factory=time.monotonic)


def due_runs(using: str, now: datetime):
    """Runs a worker may claim at ``now``: new, woken, retry due, or with an expired lease."""
    return WorkflowRun.objects.using(using).filter(status__in=CLAIMABLE_STATUSES, available_at__lte=now)


def claim_due_runs(worker_id: str, limit: int, lease: timedelta) -> list[ClaimedRun]:
    """Claim up to ``limit`` due runs, oldest first, in one transaction.

    Rows locked by another claimer are skipped where the database supports
    SKIP LOCKED; on SQLite the whole claim runs under the database write lock
    (IMMEDIATE transactions), which makes it a compare-and-set.
    """
    if limit <= 0:
        return []
    using = alias()
    connection = connections[using]
    with transaction.atomic(using=using):
        now = fetch_db_now(using)
        candidates = due_runs(using, now).order_by("available_at")
        if connection.features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        ids = list(candidates.values_list("id", flat=True)[:limit])
        if not ids:
            return []
        WorkflowRun.objects.using(using).filter(id__in=ids).update(
            status=RunStatus.RUNNING,
            worker_id=worker_id,
            available_at=now + lease,
            started_at=Coalesce("started_at", now),
            updated_at=now,
        )
        runs = WorkflowRun.objects.using(using).in_bulk(ids)
    return [ClaimedRun(run=runs[run_id], worker_id=worker_id, claimed_at=now) for run_id in ids]


def claim_run(run_id: object, worker_id: str, lease: timedelta) -> ClaimedRun | None:
    """Claim one run by id if it is due (for dispatchers that name the run)."""
    using = alias()
    with transaction.atomic(using=using):
        now = fetch_db_now(using)
        updated = (
            due_runs(using, now)
            .filter(id=run_id)
            .update(
                status=RunStatus.RUNNING,
                worker_id=worker_id,
                available_at=now + lease,
                started_at=Coalesce("started_at", now),
                updated_at=now,
            )
        )
        if not updated:
            return None
        run = WorkflowRun.objects.using(using).get(id=run_id)
    return ClaimedRun(run=run, worker_id=worker_id, claimed_at=now)


def extend_leases(worker_id: str, lease: timedelta, run_ids: list[object]) -> int:
    """The heartbeat: push the lease of the runs this worker is executing, in one UPDATE."""
    using = alias()
    return (
        WorkflowRun.objects.using(using)
        .filter(id__in=run_ids, worker_id=worker_id, status=RunStatus.RUNNING)
        .update(available_at=db_now(lease, using), updated_at=db_now(using=using))
    )

