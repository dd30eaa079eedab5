"""Claiming due runs, heartbeats: the queue side of the runs table."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from ..models import CLAIMABLE_STATUSES, RunStatus, WorkflowRun
from . import pg
from .db import alias, db_now, fetch_db_now, write_lock
from .journal import LeaseLost, commit

logger = logging.getLogger("django_openworkflow.store")


@dataclass
class ClaimedRun:
    """A run this worker now holds, with the database time of the claim."""

    run: WorkflowRun
    worker_id: str
    claimed_at: datetime
    fresh: bool = False  # never claimed before: no history to load
    lease_expired: bool = False  # the previous holder died or stalled mid-slice
    claimed_monotonic: float = field(default_factory=time.monotonic)


def _claimable() -> RawSQL:
    # The statuses as literals (our constants), not bound parameters: only
    # then can SQLite's planner (and PostgreSQL's generic plans) prove that the
    # partial claim index covers the query. Bound, SQLite scans the table.
    statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
    return RawSQL(f'"{WorkflowRun._meta.db_table}"."status" IN ({statuses})', [], output_field=BooleanField())


def due_runs(using: str, now: datetime) -> QuerySet[WorkflowRun]:
    """Runs a worker may claim at ``now``: new, woken, retry due, or with an expired lease."""
    return WorkflowRun.objects.using(using).filter(_claimable(), available_at__lte=now)


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
    if connection.vendor == "postgresql":
        return [
            ClaimedRun(
                run=run,
                worker_id=worker_id,
                claimed_at=run.claimed_at,  # type: ignore[attr-defined]
                fresh=run.fresh,  # type: ignore[attr-defined]
                lease_expired=run.lease_expired,  # type: ignore[attr-defined]
            )
            for run in pg.claim(using, worker_id, limit, lease)
        ]
    with write_lock(using), transaction.atomic(using=using):
        now = fetch_db_now(using)
        if connection.vendor == "sqlite":
            due = _sqlite_due(using, now, limit)
        else:
            candidates = due_runs(using, now).order_by("available_at")
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            due = list(candidates.values_list("id", "started_at", "worker_id")[:limit])
        if not due:
            return []
        ids = [run_id for run_id, _, _ in due]
        WorkflowRun.objects.using(using).filter(id__in=ids).update(
            status=RunStatus.RUNNING,
            worker_id=worker_id,
            available_at=now + lease,
            started_at=Coalesce("started_at", now),
            updated_at=now,
        )
        runs = WorkflowRun.objects.using(using).in_bulk(ids)
    return [
        ClaimedRun(
            run=runs[run_id],
            worker_id=worker_id,
            claimed_at=now,
            fresh=started is None,
            lease_expired=holder is not None,
        )
        for run_id, started, holder in due
    ]


def _sqlite_due(using: str, now: datetime, limit: int) -> list[tuple[Any, Any, Any]]:
    """The oldest due runs, read through the partial claim index.

    SQLite's planner, without ANALYZE statistics, prefers the (status,
    worker_id) index and sorts; on a table of a million finished runs that
    costs a scan per poll while holding the write lock. INDEXED BY pins the
    claim index, which yields due runs in order and stops at the limit.
    """
    connection = connections[using]
    statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
    sql = (
        f'SELECT "id", "started_at", "worker_id" FROM "{WorkflowRun._meta.db_table}" INDEXED BY "owf_run_claim_idx" '
        f'WHERE "status" IN ({statuses}) AND "available_at" <= %s ORDER BY "available_at" LIMIT %s'
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [connection.ops.adapt_datetimefield_value(now), limit])
        return [(uuid.UUID(run_id), started, holder) for run_id, started, holder in cursor.fetchall()]


def claim_run(run_id: Any, worker_id: str, lease: timedelta) -> ClaimedRun | None:
    """Claim one run by id if it is due (for dispatchers that name the run)."""
    using = alias()
    # A duplicate or early message is common under Celery: answer it with a
    # plain read, without taking SQLite's write lock or a row lock.
    if not due_runs(using, fetch_db_now(using)).filter(id=run_id).exists():
        return None
    with write_lock(using), transaction.atomic(using=using):
        now = fetch_db_now(using)
        candidate = due_runs(using, now).filter(id=run_id)
        if connections[using].features.has_select_for_update_skip_locked:
            candidate = candidate.select_for_update(skip_locked=True)
        before = candidate.values_list("started_at", "worker_id").first()
        if before is None:
            return None
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
    return ClaimedRun(
        run=run, worker_id=worker_id, claimed_at=now, fresh=before[0] is None, lease_expired=before[1] is not None
    )


def extend_leases(worker_id: str, lease: timedelta, run_ids: list[Any]) -> int:
    """The heartbeat: push the lease of the runs this worker is executing, in one UPDATE."""
    using = alias()
    with write_lock(using):
        return (
            WorkflowRun.objects.using(using)
            .filter(id__in=run_ids, worker_id=worker_id, status=RunStatus.RUNNING)
            .update(available_at=db_now(lease, using), updated_at=db_now(using=using))
        )


def release_run(claimed: ClaimedRun, retry_in: timedelta = timedelta(seconds=1)) -> bool:
    """Hand a held run back after an infrastructure error, so it is retried soon rather than after its lease.

    False when that failed too (the database is still away): the lease
    expires instead, and nothing is lost either way.
    """
    try:
        now = fetch_db_now()
        commit(
            claimed.run.id,
            claimed.worker_id,
            now,
            run_fields={"worker_id": None, "available_at": now + retry_in},
        )
    except (Exception, LeaseLost):
        logger.debug("could not release run %s", claimed.run.id, exc_info=True)
        return False
    return True
