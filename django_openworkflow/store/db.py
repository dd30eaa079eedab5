"""Which database, and what time it is there."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models.functions import Now
from django.utils import timezone

from ..conf import owf_settings


def alias() -> str:
    """The database alias holding the workflow tables."""
    return owf_settings.database


def db_now(delta: timedelta | None = None, using: str | None = None) -> Any:
    """An expression for the database clock (plus ``delta``), for writes and filters.

    Timestamps that decide something come from the database so that workers
    with skewed clocks agree. SQLite is embedded: its clock is this process's,
    so a plain value is used there (cheaper than SQLite's date functions).
    """
    using = using or alias()
    if connections[using].vendor == "sqlite":
        now = timezone.now()
        return now + delta if delta else now
    return Now() + delta if delta else Now()


def fetch_db_now(using: str | None = None) -> datetime:
    """Read the database clock."""
    using = using or alias()
    connection = connections[using]
    if connection.vendor == "sqlite":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT CURRENT_TIMESTAMP")
        value = cursor.fetchone()[0]
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC)
    return value


_sqlite_write_locks: dict[str, threading.RLock] = {}
_locks_guard = threading.Lock()


def write_lock(using: str) -> AbstractContextManager[Any]:
    """Serialize this process's own writes to a SQLite database.

    SQLite has one writer at a time; threads of one worker that queue on a
    Python lock wake as soon as it is free, instead of polling SQLite's busy
    handler, which sleeps in growing steps. Other processes still wait on
    the busy timeout. Other databases need no lock.
    """
    if connections[using].vendor != "sqlite":
        return nullcontext()
    with _locks_guard:
        # Re-entrant: an atomic step's own code may call into the store.
        return _sqlite_write_locks.setdefault(using, threading.RLock())
