"""The queue side of the runs table: claiming due runs, heartbeats, releasing, and what is due."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models.functions import Coalesce

from ..models import WorkflowRun
from ..states import RunStatus
from .core import BackendCore
from .records import ClaimedRun, RunRecord, RunState

RUN_RECORD_FIELDS = (
    "id", "workflow_name", "version", "input", "attempts", "deadline_at", "parent_step_attempt_id", "error",
)  # fmt: skip
"""The columns a :class:`RunRecord` is read from, in its fields' order."""


class QueueOps(BackendCore):
    """Claims, leases and the due list, for workers and dispatchers."""

    def claim(self, worker_id: str, limit: int, lease: timedelta) -> list[ClaimedRun]:
        """Claim up to ``limit`` due runs, oldest first, in one transaction.

        The portable claim: rows locked by another claimer are skipped
        (``SELECT ... FOR UPDATE SKIP LOCKED``), then the rest are leased
        with one UPDATE. Backends override :meth:`_select_due` or the whole
        claim where their database does better.
        """
        if limit <= 0:
            return []
        with self.write_lock(), transaction.atomic(using=self.alias):
            now = self.now()
            due = self._select_due(now, limit)
            if not due:
                return []
            ids = [run_id for run_id, _, _ in due]
            self._lease(WorkflowRun.objects.filter(id__in=ids), worker_id, now, lease)
            records = {record.id: record for record in self._run_records(ids)}
        return [
            ClaimedRun(records[run_id], worker_id, now, fresh=started is None, lease_expired=holder is not None)
            for run_id, started, holder in due
        ]

    def _select_due(self, now: datetime, limit: int) -> list[tuple[uuid.UUID, Any, Any]]:
        """(id, started_at, worker_id) of the oldest due runs, locked, skipping rows others have locked."""
        candidates = self.lock_skipping_locked(WorkflowRun.objects.due(now).order_by("available_at"))
        return list(candidates.values_list("id", "started_at", "worker_id")[:limit])

    def _lease(self, runs: Any, worker_id: str, now: datetime, lease: timedelta) -> int:
        return int(
            runs.update(
                status=RunStatus.RUNNING,
                worker_id=worker_id,
                available_at=now + lease,
                started_at=Coalesce("started_at", now),
                updated_at=now,
            )
        )

    def _run_records(self, ids: list[Any]) -> list[RunRecord]:
        rows = WorkflowRun.objects.filter(id__in=ids).values_list(*RUN_RECORD_FIELDS)
        return [RunRecord(*row) for row in rows]

    def claim_run(self, run_id: Any, worker_id: str, lease: timedelta) -> ClaimedRun | None:
        """Claim one run by id if it is due (for dispatchers that name the run)."""
        # A duplicate or early message is common under Celery: answer it with a
        # plain read, without taking SQLite's write lock or a row lock.
        if not WorkflowRun.objects.due(self.now()).filter(id=run_id).exists():
            return None
        with self.write_lock(), transaction.atomic(using=self.alias):
            now = self.now()
            candidate = self.lock_skipping_locked(WorkflowRun.objects.due(now).filter(id=run_id))
            before = candidate.values_list("started_at", "worker_id").first()
            if before is None or not self._lease(WorkflowRun.objects.due(now).filter(id=run_id), worker_id, now, lease):
                return None
            (record,) = self._run_records([run_id])
        return ClaimedRun(record, worker_id, now, fresh=before[0] is None, lease_expired=before[1] is not None)

    def extend_leases(self, worker_id: str, lease: timedelta, run_ids: list[Any]) -> int:
        """The heartbeat: push the lease of the runs this worker is executing, in one UPDATE."""
        with self.write_lock():
            return (
                WorkflowRun.objects.held()
                .filter(id__in=run_ids, worker_id=worker_id)
                .update(available_at=self.now_expr(lease), updated_at=self.now_expr())
            )

    # -- for dispatchers --

    def due_runs(self, limit: int) -> list[tuple[uuid.UUID, datetime]]:
        """(id, available_at) of up to ``limit`` runs due now, oldest first; read-only."""
        due = WorkflowRun.objects.due(self.now()).order_by("available_at")
        return list(due.values_list("id", "available_at")[:limit])

    def due_children(self, run_id: Any) -> list[uuid.UUID]:
        """The ids of a run's children that are due now (just started by ``run_workflow``)."""
        due = WorkflowRun.objects.due(self.now()).filter(parent_step_attempt__workflow_run_id=run_id)
        return list(due.values_list("id", flat=True))

    def run_state(self, run_id: Any) -> RunState | None:
        """Status, holder, next due time and parent of a run, in one query (None if it is gone)."""
        row = (
            WorkflowRun.objects.filter(id=run_id)
            .values_list("status", "worker_id", "available_at", "parent_step_attempt__workflow_run_id")
            .first()
        )
        return RunState(*row) if row is not None else None
