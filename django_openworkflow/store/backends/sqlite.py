"""SQLite: embedded, one writer at a time, this process's clock."""

from __future__ import annotations

import threading
import uuid
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.db.models import QuerySet
from django.utils import timezone

from ...models import WorkflowRun
from ...states import CLAIMABLE_STATUSES
from .base import Backend

_write_locks: dict[str, threading.RLock] = {}
_write_locks_guard = threading.Lock()


class SQLiteBackend(Backend):
    display_name = "sqlite"

    def now(self) -> datetime:
        # Embedded: the database's clock is this process's (cheaper than SQLite's date functions).
        return timezone.now()

    def now_expr(self, delta: timedelta | None = None) -> Any:
        now = timezone.now()
        return now + delta if delta else now

    def write_lock(self) -> AbstractContextManager[Any]:
        """Serialize this process's own writes.

        SQLite has one writer at a time; threads of one worker that queue on a
        Python lock wake as soon as it is free, instead of polling SQLite's busy
        handler, which sleeps in growing steps. Other processes still wait on
        the busy timeout. Re-entrant: an atomic step's own code may call into
        the store.
        """
        with _write_locks_guard:
            return _write_locks.setdefault(self.alias, threading.RLock())

    def lock_skipping_locked(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # No row locks: every write transaction holds the database's write lock
        # (IMMEDIATE), which makes a claim a compare-and-set.
        return queryset

    def _select_due(self, now: datetime, limit: int) -> list[tuple[uuid.UUID, Any, Any]]:
        """The oldest due runs, read through the partial claim index.

        SQLite's planner, without ANALYZE statistics, prefers the (status,
        worker_id) index and sorts; on a table of a million finished runs that
        costs a scan per poll while holding the write lock. INDEXED BY pins the
        claim index, which yields due runs in order and stops at the limit. The
        claim runs under the write lock (IMMEDIATE transactions), which makes
        it a compare-and-set without row locks.
        """
        statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
        sql = (
            f'SELECT "id", "started_at", "worker_id" FROM "{WorkflowRun._meta.db_table}" '
            f'INDEXED BY "owf_run_claim_idx" '
            f'WHERE "status" IN ({statuses}) AND "available_at" <= %s ORDER BY "available_at" LIMIT %s'
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [self.connection.ops.adapt_datetimefield_value(now), limit])
            return [(uuid.UUID(run_id), started, holder) for run_id, started, holder in cursor.fetchall()]

    def check(self) -> list[checks.CheckMessage]:
        options = self.connection.settings_dict.get("OPTIONS", {})
        init = str(options.get("init_command", "")).lower().replace(" ", "")
        if options.get("transaction_mode") == "IMMEDIATE" and "journal_mode=wal" in init:
            return []
        return [
            checks.Warning(
                "SQLite database used by django-openworkflow is not set up for several processes",
                hint=(
                    'Set OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 20, '
                    '"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"} '
                    "so that workers and web processes wait for the write lock instead of failing."
                ),
                id="openworkflow.W001",
            )
        ]
