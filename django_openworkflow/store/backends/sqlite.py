"""SQLite: embedded, one writer at a time, this process's clock."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import math
import os
import select
import sqlite3
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.db.models import BinaryField, QuerySet
from django.db.models.functions import Cast
from django.utils import timezone

from ...models import WorkflowRun
from ...states import CLAIMABLE_STATUSES
from ..containment import ContainmentCompiler
from ..notify import RECONNECT_BACKOFF, wait_to_reconnect
from ..queue import CANDIDATE_FIELDS, Candidate
from .base import Backend

logger = logging.getLogger(__name__)

_write_locks: dict[str, threading.RLock] = {}
_write_locks_guard = threading.Lock()


class SQLiteCompiler(ContainmentCompiler):
    """SQLite's JSON1: a path is an SQL expression (a parameter or an element's ``fullkey``) into one document.

    ``json_each`` gives each element's full path (``fullkey``), so nested patterns keep
    reading the input column itself; ``json_type`` names the JSON type.
    """

    TYPES = {"number": "IN ('integer', 'real')", "string": "= 'text'"}

    def root(self) -> tuple[str, list[Any]]:
        return "%s", ["$"]

    def child(self, path: tuple[str, list[Any]], key: str) -> tuple[str, list[Any]]:
        sql, params = path
        if sql == "%s":  # a path known in Python: extend it there
            return "%s", [f'{params[0]}."{key}"']
        return f"({sql} || %s)", [*params, f'."{key}"']

    def member(self, doc: str, path: tuple[str, list[Any]], key: str, value: Any) -> tuple[str, list[Any]]:
        if key.isascii() and key.isprintable():
            return super().member(doc, path, key, value)
        # A path names a key as the JSON text spells it (an escaped \\u00fc or ü, as written):
        # look the key up among the object's members by its value, then use their own path.
        alias = self.alias()
        where, params = self.match(value, doc, (f"{alias}.fullkey", []))
        members = f"json_each({doc}, {path[0]}) AS {alias}"
        return f"EXISTS (SELECT 1 FROM {members} WHERE {alias}.key = %s AND {where})", [*path[1], key, *params]

    def is_type(self, doc: str, path: tuple[str, list[Any]], kind: str) -> tuple[str, list[Any]]:
        test = self.TYPES.get(kind, f"= '{kind}'")
        return f"json_type({doc}, {path[0]}) {test}", list(path[1])

    def number_equals(self, doc: str, path: tuple[str, list[Any]], value: float) -> tuple[str, list[Any]]:
        return self._equals(doc, path, value)

    def string_equals(self, doc: str, path: tuple[str, list[Any]], value: str) -> tuple[str, list[Any]]:
        return self._equals(doc, path, value)  # the BINARY collation: byte by byte

    @staticmethod
    def _equals(doc: str, path: tuple[str, list[Any]], value: float | str) -> tuple[str, list[Any]]:
        return f"json_extract({doc}, {path[0]}) = %s", [*path[1], value]

    def some_element(self, doc: str, path: tuple[str, list[Any]], item: Any) -> tuple[str, list[Any]]:
        alias = self.alias()
        where, params = self.match(item, doc, (f"{alias}.fullkey", []))
        return f"EXISTS (SELECT 1 FROM json_each({doc}, {path[0]}) AS {alias} WHERE {where})", [*path[1], *params]


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

    def _select_due(self, now: datetime, limit: int, queues: Sequence[str], fair: bool = False) -> list[Candidate]:
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
        first run not yet due, whether anything is due at all. A fair claim
        reads the fair claim index, in order of the runs' places in line.
        """
        table = WorkflowRun._meta.db_table
        statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
        columns = ", ".join(f'"{name}"' for name in CANDIDATE_FIELDS)
        in_queues = ", ".join(["%s"] * len(queues))  # one queue: SQLite reads "IN (?)" as "= ?"
        anything_due = (
            f'SELECT 1 FROM "{table}" INDEXED BY "owf_run_claim_idx" '
            f'WHERE "status" IN ({statuses}) AND "available_at" <= %s LIMIT 1'
        )
        index, in_line, by_place = (
            ("owf_run_fair_claim_idx", ' AND "fair_at" IS NOT NULL', ' "fair_at",')
            if fair
            else ("owf_run_queue_claim_idx", "", "")
        )
        sql = (
            f'SELECT {columns} FROM "{table}" INDEXED BY "{index}" '
            f'WHERE "queue" IN ({in_queues}) AND "status" IN ({statuses}) AND "available_at" <= %s{in_line} '
            f'ORDER BY "priority" DESC,{by_place} "available_at" LIMIT %s'
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

    def input_containing(self, queryset: QuerySet[Any], pattern: dict[str, Any]) -> QuerySet[Any]:
        return self._compiled_containment(queryset, SQLiteCompiler, pattern)

    def listener(self, channels: Iterable[str], on_notify: Callable[[str, str], None]) -> DataVersionListener | None:
        name = str(self.connection.settings_dict["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            return None  # one connection's own database: no other connection commits to it
        return DataVersionListener(channels, on_notify, name)

    def json_key_text(self, expression: Any) -> Any:
        # SQLite keeps a lone surrogate in JSON (written by other code, before payloads were
        # checked), and the text json_extract makes of it does not decode as UTF-8: read the
        # bytes, which the caller decodes with a replacement character.
        return Cast(expression, BinaryField())

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


class _DirectoryWatch:
    """Linux inotify on a database's directory: blocks until a file of that database is written.

    SQLite writes a commit to the ``-wal`` file (or, without WAL, to the
    database and its ``-journal``), so a write there means a commit is under
    way, by any process. It also sees the database file itself deleted or
    replaced (a test database dropped, a restore). Through ctypes: no
    dependency, and no thread that wakes to poll. None where inotify is
    missing (macOS, Windows).
    """

    IN_MODIFY = 0x2
    IN_CLOSE_WRITE = 0x8
    IN_MOVED_FROM = 0x40
    IN_MOVED_TO = 0x80
    IN_CREATE = 0x100
    IN_DELETE = 0x200

    def __init__(self, fd: int, database: bytes) -> None:
        self.fd = fd
        self.database = database
        self.names = frozenset({database, database + b"-wal", database + b"-journal"})

    @classmethod
    def open(cls, database: str) -> _DirectoryWatch | None:
        if not sys.platform.startswith("linux") or database.startswith("file:"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        path = os.path.abspath(database)
        mask = cls.IN_MODIFY | cls.IN_CLOSE_WRITE | cls.IN_MOVED_FROM | cls.IN_MOVED_TO | cls.IN_CREATE | cls.IN_DELETE
        if libc.inotify_add_watch(fd, os.fsencode(os.path.dirname(path)), mask) < 0:
            os.close(fd)
            return None
        return cls(fd, os.fsencode(os.path.basename(path)))

    def drain(self) -> tuple[bool, bool]:
        """Read every pending event; whether one was about the database's files, and whether the database was replaced.

        Replaced: the database file itself deleted, renamed, or created anew.
        """
        ours = replaced = False
        gone = self.IN_DELETE | self.IN_MOVED_FROM | self.IN_MOVED_TO | self.IN_CREATE
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return ours, replaced
            offset = 0
            while offset + 16 <= len(data):
                _, mask, _, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].rstrip(b"\0")
                ours = ours or name in self.names
                replaced = replaced or (name == self.database and bool(mask & gone))
                offset += 16 + length

    def close(self) -> None:
        os.close(self.fd)


class DataVersionListener(threading.Thread):
    """SQLite's stand-in for LISTEN: a wake-up on every channel when another connection commits.

    SQLite has no notifications, but ``PRAGMA data_version`` changes on a
    connection whenever any other connection (thread or process) has
    committed since it last asked; reading it touches only the WAL index in
    shared memory. On Linux the thread sleeps in inotify until a file of the
    database is written, then looks at data_version until writes have been
    quiet for a moment (the write comes just before the commit is visible),
    every 20 ms once writes have kept coming for 100 ms.
    An idle worker wakes once a second. Elsewhere it looks every few
    milliseconds, which on a VM costs about 1 % of a core. The payload is
    empty: a commit says that something changed, not what, so the owner
    looks (a claim, a run's status). When the database file is deleted (a
    test database dropped at teardown) it closes its connection, so that the
    file's ``-wal`` and ``-shm`` go too, and waits for the file to come back
    without creating it.
    """

    BUSY_INTERVAL = 0.002
    """Seconds between looks just after a write (and, without inotify, always 4 ms)."""
    LOADED_AFTER = 0.1
    LOADED_INTERVAL = 0.02
    """Seconds between looks once writes have kept coming for ``LOADED_AFTER`` seconds (under load)."""
    SETTLE = 0.025
    """How long after the last write the thread keeps looking before it sleeps in inotify again."""
    IDLE_INTERVAL = 1.0
    """The longest sleep in inotify: a look once a second, should a write go unseen."""

    def __init__(self, channels: Iterable[str], on_notify: Callable[[str, str], None], database: str) -> None:
        super().__init__(name="owf-listener", daemon=True)
        # Set before start() and only read afterwards; the connection, the inotify watch
        # and the backoff are confined to the thread. Other threads reach it only through
        # the events and the pipe that stop() writes to, whose write end is guarded by
        # _pipe_lock: once the thread has closed it, the number may name another file.
        self.channels = list(channels)
        self.on_notify = on_notify
        # Absolute, as SQLite opened it: the process may change directory later.
        self.database = database if database.startswith("file:") else os.path.abspath(database)
        self.connected = threading.Event()
        self._stop_event = threading.Event()
        self._stop_read, stop_write = os.pipe()
        self._stop_write: int | None = stop_write
        self._pipe_lock = threading.Lock()
        self._connected_at = 0.0

    def stop(self) -> None:
        """Ask the thread to close its connection and end (at once, even while it sleeps in inotify)."""
        self._stop_event.set()
        with self._pipe_lock, contextlib.suppress(OSError):
            if self._stop_write is not None:
                os.write(self._stop_write, b"x")

    def _notify(self) -> None:
        for channel in self.channels:
            self.on_notify(channel, "")

    def run(self) -> None:
        watch = _DirectoryWatch.open(self.database)
        backoff = RECONNECT_BACKOFF[0]
        # A daemon thread is killed at exit with its connection open, and a connection
        # that is not closed leaves the database's -wal and -shm files behind.
        atexit.register(self._stop_at_exit)
        try:
            while not self._stop_event.is_set():
                try:
                    if self._database_missing():
                        # Deleted (a test database dropped at teardown): wait for it to come
                        # back rather than create an empty one by connecting.
                        self._pause(watch)
                        continue
                    self._listen(watch)
                    # It returned: the database file was deleted or replaced, and its
                    # connection is closed. Look again.
                    self.connected.clear()
                except Exception as exc:
                    # Never end silently: a failed connection or a failing on_notify is
                    # logged and the thread connects again.
                    backoff = wait_to_reconnect(
                        exc,
                        backoff=backoff,
                        connected=self.connected,
                        connected_at=self._connected_at,
                        stop=self._stop_event,
                        expected=sqlite3.Error,
                        what="SQLite wake-up",
                        logger=logger,
                    )
        finally:
            atexit.unregister(self._stop_at_exit)
            self.connected.clear()
            if watch is not None:
                watch.close()
            with self._pipe_lock:
                os.close(self._stop_read)
                if self._stop_write is not None:
                    os.close(self._stop_write)
                self._stop_write = None

    def _stop_at_exit(self) -> None:
        self.stop()
        self.join(2)

    def _database_missing(self) -> bool:
        # A file: URI is opened as it is: it cannot be looked at here.
        return not self.database.startswith("file:") and not os.path.exists(self.database)

    def _pause(self, watch: _DirectoryWatch | None) -> None:
        """Sleep until a file of the database's directory changes, stop() is called, or a second passes."""
        if watch is None:
            self._stop_event.wait(self.IDLE_INTERVAL)
            return
        ready, _, _ = select.select([watch.fd, self._stop_read], [], [], self.IDLE_INTERVAL)
        if watch.fd in ready:
            watch.drain()

    def _listen(self, watch: _DirectoryWatch | None) -> None:
        """Watch until stopped, or until the database file is deleted or replaced; raises when the connection fails."""
        seen: dict[str, tuple[int, int]] = {}  # the -wal and -shm files this connection used: (device, inode)
        try:
            self._watch(watch, seen)
        finally:
            if self._database_missing():
                # SQLite removes a database's -wal and -shm files when its last connection
                # closes, unless the database file was deleted first (Django deletes a test
                # database once its own connection is closed, while this one is open).
                # Only the very files this connection used: a database created again at the
                # same path meanwhile has files of its own, and losing its WAL loses commits.
                for path, identity in seen.items():
                    with contextlib.suppress(FileNotFoundError):
                        current = os.stat(path)
                        if (current.st_dev, current.st_ino) == identity and self._database_missing():
                            os.remove(path)

    def _watch(self, watch: _DirectoryWatch | None, seen: dict[str, tuple[int, int]]) -> None:
        # uri=True, as Django opens it: NAME may be a file: URI.
        with contextlib.closing(sqlite3.connect(self.database, uri=True, isolation_level=None)) as conn:
            pragma = conn.cursor()
            last = pragma.execute("PRAGMA data_version").fetchone()
            if not self.database.startswith("file:"):
                for suffix in ("-wal", "-shm"):
                    with contextlib.suppress(FileNotFoundError):
                        stat = os.stat(self.database + suffix)
                        seen[self.database + suffix] = (stat.st_dev, stat.st_ino)
            self._connected_at = time.monotonic()
            self.connected.set()
            self._notify()  # whatever was committed before we looked
            written_at = busy_since = -math.inf
            while not self._stop_event.is_set():
                if watch is None:
                    self._stop_event.wait(2 * self.BUSY_INTERVAL)
                    if self._database_missing():
                        return
                else:
                    settling = time.monotonic() - written_at < self.SETTLE
                    timeout = self.BUSY_INTERVAL if settling else self.IDLE_INTERVAL
                    ready, _, _ = select.select([watch.fd, self._stop_read], [], [], timeout)
                    written, replaced = watch.drain() if watch.fd in ready else (False, False)
                    if replaced or (not ready and self._database_missing()):
                        return
                    if written:
                        written_at = time.monotonic()
                        if not settling:
                            busy_since = written_at
                        elif written_at - busy_since > self.LOADED_AFTER:
                            # Written without a pause: a busy worker claims as its slots free up
                            # anyway, so look less often and leave the CPU to the work.
                            time.sleep(self.LOADED_INTERVAL)
                version = pragma.execute("PRAGMA data_version").fetchone()
                if version != last:
                    last = version
                    self._notify()
