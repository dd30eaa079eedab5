"""The part of a backend that differs between databases: its hooks, with portable defaults.

Every operation in ``queue.py``, ``fence.py``, ``journal.py``, ``waits.py``,
``runs.py`` and ``messages.py`` is written once against these hooks; a class per database
in ``backends/`` overrides the ones that differ (the clock, the claim
statement, JSON containment, locks, LISTEN/NOTIFY, the SQLite write lock).
Nothing outside ``backends/`` asks which database it is talking to.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.core import checks
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Expression, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, Now
from django.utils import timezone

if TYPE_CHECKING:
    from .containment import ContainmentCompiler
    from .notify import Listener
    from .records import ConnectionRoom

RETRY_ATTEMPTS = 6
"""Tries of a write the database aborted over locks (:meth:`BackendCore.retrying`): 1.24 s of pauses at most."""


def contains(payload: Any, pattern: Any) -> bool:
    """JSON containment with PostgreSQL's rules for ``payload @> pattern`` (below the top level).

    Objects contain every key of the pattern with a containing value;
    arrays contain each element of the pattern in some element; scalars
    are equal, numbers by value (``1`` and ``1.0`` are equal, ``true`` is
    not ``1``).
    """
    if isinstance(pattern, dict):
        return isinstance(payload, dict) and all(k in payload and contains(payload[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(payload, list) and all(any(contains(p, item) for p in payload) for item in pattern)
    if isinstance(pattern, bool) or isinstance(payload, bool):
        return payload is pattern
    if isinstance(pattern, int | float) and isinstance(payload, int | float):
        return payload == pattern
    return bool(payload == pattern and type(payload) is type(pattern))


T = TypeVar("T")


def gate_name(key: str) -> str:
    """The gate table's row for a limit key: a fixed-length hash, whatever the key's length."""
    return hashlib.sha256(key.encode()).hexdigest()


def tightest_room(limits: Iterable[tuple[str, int, int]]) -> ConnectionRoom | None:
    """Of ``(what, limit, in use)`` rows, the limit with the fewest connections left; None without rows."""
    from .records import ConnectionRoom

    rooms = [ConnectionRoom(int(limit) - int(used), int(limit), what) for what, limit, used in limits]
    return min(rooms, key=lambda room: room.free, default=None)


class BackendCore:
    """One database alias and the hooks where databases differ."""

    display_name = "generic"

    def __init__(self, alias: str) -> None:
        self.alias = alias
        # Concurrency keys this process found nobody waiting under, until when (monotonic): see free_place.
        self._quiet_keys: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.alias!r}>"

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """This thread's connection to the alias."""
        return connections[self.alias]

    def close_connection(self) -> None:
        """Close this thread's connection to the alias (threads that write rarely)."""
        self.connection.close()

    def close_thread_connections(self) -> None:
        """Close every database connection this thread opened (a step's thread, as it ends)."""
        for wrapper in connections.all(initialized_only=True):
            wrapper.close()

    def is_transient(self, error: BaseException | None) -> bool:
        """Whether a database error is about the connection or a lock, and worth retrying as it is."""
        return isinstance(error, OperationalError | InterfaceError)

    def retrying(self, operation: Callable[[], T], attempts: int = RETRY_ATTEMPTS) -> T:
        """Run a short transaction again when the database aborted it over locks (a deadlock's victim).

        The one retry policy of every write a caller or a worker makes: up to
        ``attempts`` tries, each after a random pause up to twice the last one's
        bound (up to 40 ms, 80 ms, ..., never over 1 s), so that two writers that keep choosing
        each other as victims (two prunes, two debounced starts) fall out of
        step. Only outside the caller's own transaction, which the database has
        aborted as a whole; a connection error fails again and is raised.
        """
        for attempt in range(1, attempts + 1):
            try:
                return operation()
            except DatabaseError as exc:
                if attempt == attempts or self.connection.in_atomic_block or not self.is_transient(exc):
                    raise
                time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
        raise AssertionError("unreachable")  # pragma: no cover

    def execute_hot(self, sql: str, params: Sequence[Any], *, prepare: bool = True) -> list[tuple[Any, ...]]:
        """Run one of the statements the engine runs for every run or step; return its rows.

        PostgreSQL prepares them (``prepare``: worth it for a statement whose
        text will come again); elsewhere this is a plain cursor.
        """
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall()) if cursor.description is not None else []

    def insert_with_ids(self, rows: list[Any]) -> None:
        """Insert model instances in one statement and fill in their ids (INSERT ... RETURNING)."""
        if rows:
            type(rows[0]).objects.bulk_create(rows)

    # -- the clock --

    def now(self) -> datetime:
        """Read the database clock, in UTC.

        Timestamps that decide something come from the database so that
        workers with skewed clocks agree.
        """
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT CURRENT_TIMESTAMP")
            value = cursor.fetchone()[0]
        return self._aware(value)

    def now_expr(self, delta: timedelta | None = None) -> Any:
        """An expression for the database clock (plus ``delta``), for writes and filters."""
        now: Expression = Now()
        return now + delta if delta else now

    @staticmethod
    def _aware(value: datetime) -> datetime:
        return timezone.make_aware(value, UTC) if timezone.is_naive(value) else value

    # -- locks --

    def write_lock(self) -> AbstractContextManager[Any]:
        """Held around every write transaction; only SQLite needs one (one writer at a time)."""
        return nullcontext()

    def lock_skipping_locked(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Lock the rows ``queryset`` reads, skipping rows another transaction has locked (claims)."""
        return queryset.select_for_update(skip_locked=True)

    def lock_keys(self, keys: list[str]) -> None:
        """Inside a transaction: lock each limit key until it ends, in one order (no deadlocks).

        The portable lock is a row per key in the gate table, inserted on
        first use and locked with ``SELECT ... FOR UPDATE``.
        """
        from ..models import Gate

        names = sorted({gate_name(key) for key in keys})
        if names:
            Gate.objects.bulk_create([Gate(name=name) for name in names], ignore_conflicts=True)
            list(Gate.objects.select_for_update().filter(name__in=names).order_by("name").values_list("name"))

    def lock_event_type(self, event_type: str) -> None:
        """Inside a transaction: serialize senders and new waiters of one event type."""

    # -- JSON containment --

    def json_key_text(self, expression: Any) -> Any:
        """``expression`` (a JSON key read as text) as this database can hand it to Python.

        The text itself here; SQLite reads bytes instead (see its backend).
        """
        return expression

    def event_waits(self, queryset: Any, payload: Any) -> list[Any]:
        """The open event waits in ``queryset`` whose ``context["match"]`` the payload contains.

        The portable version filters in Python; databases with JSON
        containment in SQL narrow the query first.
        """
        return [attempt for attempt in queryset if contains(payload, (attempt.context or {}).get("match"))]

    def stored_form(self, column: str) -> Any:
        """A column's value as stored, as an expression that compares byte for byte (``store/rotation.py``).

        Its text here; MySQL and MariaDB compare text without regard to case, so they read bytes.
        """
        return Cast(column, TextField())

    # -- connections --

    def open_connection(self) -> None:
        """Open this thread's connection to the alias now unless it is open: a thread that must have one keeps it.

        Raises :class:`~django.db.DatabaseError` when the database refuses it.
        """
        self.connection.ensure_connection()

    def connection_room(self) -> ConnectionRoom | None:
        """How many more connections this process may open to the alias now; None where the database has no limit.

        An estimate read from the server's own counts: other processes open
        and close connections meanwhile.
        """
        return None

    # -- wake-ups --

    def listener(self, channels: Iterable[str], on_notify: Callable[[str, str], None]) -> Listener | None:
        """A thread that calls ``on_notify`` for each notification, or None where the database has none."""
        return None

    def want_wakeups(self, listener: Listener, channel: str, key: str, on: bool) -> bool | None:
        """Ask for notifications on ``channel`` (``on``) or stop asking.

        True: done. False: this database needs no asking. None: the request
        could not be made now (inside a transaction, where nobody would see
        it before the commit): poll.

        Where notifying costs every committing writer (PostgreSQL: one
        server-wide lock), the database notifies only those who asked:
        ``key`` is a run id on the done channel (one waiter's run), anything
        unique per listener on the due channel. ``listener`` must be
        listening already; the request is dropped when its connection ends.
        Elsewhere this does nothing.
        """
        return False

    def input_index(self, action: str) -> str | None:
        """Create, drop or describe (``"create"``, ``"drop"``, ``"status"``) the index of searches by input.

        Returns what the index is now, or None where the database has no such index.
        """
        return None

    # -- settings --

    def check(self) -> list[checks.CheckMessage]:
        """System check messages about this database's settings."""
        return []

    # -- search by input --

    def input_containing(self, queryset: QuerySet[Any], pattern: dict[str, Any]) -> QuerySet[Any]:
        """The runs of ``queryset`` whose input contains ``pattern`` (checked by ``containment.check_pattern``).

        The rules are :func:`contains`'s on every database. The default is
        PostgreSQL's ``@>``, which its GIN index on the input serves.
        """
        return queryset.filter(input__contains=pattern)

    def _compiled_containment(
        self, queryset: QuerySet[Any], compiler: type[ContainmentCompiler], pattern: dict[str, Any]
    ) -> QuerySet[Any]:
        """``input_containing`` by a containment compiler: one boolean SQL expression over the input column."""
        quote = self.connection.ops.quote_name
        column = f"{quote(queryset.model._meta.db_table)}.{quote('input')}"
        sql, params = compiler(column).compile(pattern)
        return queryset.filter(RawSQL(sql, params, output_field=BooleanField()))
