"""SQLite: embedded, one writer at a time, this process's clock."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.db.models import QuerySet
from django.utils import timezone

from ...models import WorkflowRun
from ...states import CLAIMABLE_STATUSES
from ..queue import CANDIDATE_FIELDS, Candidate
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

    def lock_keys(self, keys: list[str]) -> None:
        # Every write transaction already holds the database's write lock.
        pass

    def _select_due(self, now: datetime, limit: int, queues: Sequence[str]) -> list[Candidate]:
        """The first due runs in claim order, read through the partial queue claim index.

        SQLite's planner, without ANALYZE statistics, prefers the (status,
        worker_id) index and sorts; on a table of a million finished runs that
        costs a scan per poll while holding the write lock. INDEXED BY pins the
        claim index, which yields one queue's due runs in order and stops at
        the limit. The claim runs under the write lock (IMMEDIATE
        transactions), which makes it a compare-and-set without row locks.

        That index puts a priority's sleeping and waiting runs after its due
        ones, so a claim that finds nothing would read them all: an idle
        worker first asks the (available_at) claim index, which stops at the
        first run not yet due, whether anything is due at all.
        """
        table = WorkflowRun._meta.db_table
        statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
        columns = ", ".join(f'"{name}"' for name in CANDIDATE_FIELDS)
        in_queues = ", ".join(["%s"] * len(queues))  # one queue: SQLite reads "IN (?)" as "= ?"
        anything_due = (
            f'SELECT 1 FROM "{table}" INDEXED BY "owf_run_claim_idx" '
            f'WHERE "status" IN ({statuses}) AND "available_at" <= %s LIMIT 1'
        )
        sql = (
            f'SELECT {columns} FROM "{table}" INDEXED BY "owf_run_queue_claim_idx" '
            f'WHERE "queue" IN ({in_queues}) AND "status" IN ({statuses}) AND "available_at" <= %s '
            f'ORDER BY "priority" DESC, "available_at" LIMIT %s'
        )
        at = self.connection.ops.adapt_datetimefield_value(now)
        with self.connection.cursor() as cursor:
            cursor.execute(anything_due, [at])
            if cursor.fetchone() is None:
                return []
            cursor.execute(sql, [*queues, at, limit])
            rows = cursor.fetchall()
        # Only whether started_at is NULL matters here, so its text is not converted.
        return [Candidate(uuid.UUID(run_id), *rest) for run_id, *rest in rows]

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
