"""PostgreSQL: one statement per claim and per step boundary, JSON containment in SQL, LISTEN/NOTIFY.

Data-modifying CTEs let the fence (the conditional UPDATE of the run row),
the attempt updates and the new attempt share one statement, hence one
round trip and one implicit transaction. Every CTE after the fence is
conditional on the fence having matched, so a worker that lost its lease
still writes nothing. The portable path in ``fence.py`` and ``queue.py``
does the same in several statements.

The only module of the package that imports psycopg; it is imported only
when a PostgreSQL alias holds the workflow tables.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import connections
from django.db.models import Field, Model
from psycopg.types.datetime import TimestamptzLoader

from ...models import StepAttempt, WorkflowRun
from ...states import RunStatus
from ..core import tightest_room
from ..notify import DUE_CHANNEL, RECONNECT_BACKOFF, wait_to_reconnect
from ..queue import RUN_RECORD_FIELDS
from ..records import AttributeWrite, ClaimedRun, ConnectionRoom, Fence, NewAttempt, ProgressWrite, RunRecord, TakenFrom
from .base import Backend
from .postgresql_claim import _field, _q, claim_sql, lease_sql

_claim_sql = claim_sql  # the name tests/store/test_postgresql.py reads the plan of

if TYPE_CHECKING:
    ServerBindingCursor = psycopg.Cursor[Any]
else:
    from django.db.backends.postgresql.base import ServerBindingCursor

logger = logging.getLogger("django_openworkflow.notify")

TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
ONLY_WHEN_ASKED = 2**31 - 1
"""psycopg's ``prepare_threshold`` while preparing is on: a statement that did not ask is never prepared."""


class _PreparingCursor(ServerBindingCursor):
    """Django's server-side binding cursor whose statements are prepared as ``prepare`` says."""

    prepare: bool | None = True

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: bool | None = None
    ) -> Any:
        return super().execute(query, params, prepare=self.prepare if prepare is None else prepare, binary=binary)


class PostgreSQLBackend(Backend):
    display_name = "postgresql"

    def now(self) -> datetime:
        # As a UTC timestamp without a zone: Django's psycopg loader labels a
        # timestamptz with the zone it set at connect time instead of
        # converting it, so a session whose zone changed since (a pooler in
        # transaction mode, a server default) would read hours off.
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp() AT TIME ZONE 'UTC'")
            return self._aware(cursor.fetchone()[0])

    def connection_room(self) -> ConnectionRoom | None:
        # The server's, the login role's and the database's limits, each with the connections that count
        # against it (a superuser is subject to none but max_connections, and may use the reserved ones).
        with self.connection.cursor() as cursor:
            cursor.execute(_CONNECTION_LIMITS)
            return tightest_room(cursor.fetchall())

    def _claim_queues(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str], *, fair: bool
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` due runs in one statement, highest priority first, then oldest (or fairly).

        Runs that need admission under a concurrency or rate limit are not
        leased by the statement, which only says they were there; the
        portable claim (with :meth:`_admit`) then fills the remaining slots
        in a second transaction. Without limits in play a claim stays one
        statement.
        """
        # One queue (the usual case) is an equality: only then does PostgreSQL 15 read the
        # queue claim index in claim order instead of sorting every due run.
        one = len(queues) == 1
        params = [queues[0] if one else list(queues), limit, RunStatus.RUNNING.value, worker_id, lease]
        rows = self.execute_hot(claim_sql(one, fair), params)
        width = len(RUN_RECORD_FIELDS)
        # Each row: the record's columns, then priority, fresh, held_by (the worker whose lease ran
        # out), lease_ended_at, due_at (or the place in line), claimed_at, held_back.
        leased = [(row[:width], *row[width:-1]) for row in rows if not row[-1]]
        leased.sort(key=lambda run: (-run[1], run[5]))
        connection = self.connection
        claimed = [
            ClaimedRun(
                self._row_record(record, connection),
                worker_id,
                claimed_at=self._aware(claimed_at),
                fresh=fresh,
                lease_expired=held_by is not None,
                taken_from=None if held_by is None else TakenFrom(held_by, self._aware(lease_ended_at)),
            )
            for record, _, fresh, held_by, lease_ended_at, _, claimed_at in leased
        ]
        if len(claimed) < len(rows) and len(claimed) < limit:  # some rows were held back
            # Limits are in play: the portable claim admits (or sets aside) the rest.
            claimed += super()._claim_queues(worker_id, limit - len(claimed), lease, queues, fair=fair)
        return claimed

    def _lease_records(
        self, ids: list[uuid.UUID], worker_id: str, now: datetime, lease: timedelta
    ) -> dict[Any, RunRecord]:
        # The lease and the records in one UPDATE ... RETURNING.
        params = [RunStatus.RUNNING.value, worker_id, now + lease, now, now, ids]
        connection = self.connection
        records = [self._row_record(row, connection) for row in self.execute_hot(lease_sql(), params)]
        return {record.id: record for record in records}

    def _row_record(self, values: Sequence[Any], connection: Any) -> RunRecord:
        """The :class:`RunRecord` of a row of :data:`RUN_RECORD_FIELDS` columns read by a plain cursor.

        Each value goes through what the ORM would do to it (JSON columns are decoded).
        """
        record = []
        for (field, converters), value in zip(self._record_converters(), values, strict=True):
            for convert in converters:
                value = convert(value, field, connection)
            record.append(value)
        return RunRecord(*record)

    @functools.cache  # noqa: B019 (one backend per alias, for the process's life)
    def _record_converters(self) -> list[tuple[Field[Any, Any], list[Callable[..., Any]]]]:
        fields = [_field(WorkflowRun, name) for name in RUN_RECORD_FIELDS]
        return [(field, field.get_db_converters(self.connection)) for field in fields]

    def lock_keys(self, keys: list[str]) -> None:
        # Transaction-level advisory locks, taken in the order of their hashes.
        if keys:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_advisory_xact_lock(h) FROM "
                    "(SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(%s::text[]) AS k ORDER BY 1) AS s",
                    [keys],
                )

    def _step_boundary(self, fence: Fence, insert: NewAttempt | None, run_fields: dict[str, Any]) -> int | None:
        """Fence + attempt updates + new attempts in one statement (with progress or attributes: the portable path's).

        With ``unless_canceling`` the fence also requires that nobody asked to cancel
        the run; when it matches nothing, the portable path's :meth:`_refused` says why.
        """
        run_id, now, pending = fence.run_id, fence.now, fence.pending
        if any(isinstance(change, ProgressWrite | AttributeWrite) for change in pending):
            return super()._step_boundary(fence, insert, run_fields)
        using = self.alias
        run_values = {"updated_at": now, **run_fields}
        connection = connections[using]
        params = [_param(using, WorkflowRun, name, value, connection) for name, value in run_values.items()]
        params += [run_id, fence.worker_id, RunStatus.RUNNING.value]
        new_rows: list[NewAttempt] = []
        for change in pending:
            if isinstance(change, NewAttempt):
                new_rows.append(change)
            elif not isinstance(change, ProgressWrite | AttributeWrite):
                values = (change.status, change.output, change.error, change.finished_at)
                params += [
                    _param(using, StepAttempt, n, v, connection) for n, v in zip(_UPDATE_COLUMNS, values, strict=True)
                ]
                params.append(change.attempt_id)
        if insert is not None:
            new_rows.append(insert)
        for new in new_rows:
            params += _attempt_row(using, run_id, new, now)
        kinds = tuple(isinstance(change, NewAttempt) for change in pending)
        sql = _commit_sql(using, tuple(run_values), kinds, insert is not None, fence.unless_canceling)
        [(held, new_id)] = self.execute_hot(sql, params)
        if not held:
            self._refused(fence)
        return int(new_id) if new_id is not None else None

    def execute_hot(self, sql: str, params: Sequence[Any], *, prepare: bool = True) -> list[tuple[Any, ...]]:
        """Run a frequent statement with server-side binding, prepared, through Django's cursor wrapper.

        Django's default cursor binds client-side: it quotes every value
        into the SQL text, so PostgreSQL parses and plans each statement
        anew, which is most of its CPU in a step boundary. Bound server-side
        and prepared, the text is parsed once per connection and its plan
        kept. Django turns psycopg's automatic preparing off
        (``prepare_threshold`` None), so these statements ask for it one by
        one and a project's own stay as they were. A ``prepare_threshold``
        set in the alias's ``OPTIONS`` decides instead: None turns preparing
        off (PgBouncer before 1.21 in transaction mode). Execute wrappers
        and ``DEBUG`` query logging see these statements as any other.
        """
        wrapper = self.connection
        wrapper.ensure_connection()
        raw = wrapper.connection
        cursor = _PreparingCursor(raw)
        # psycopg's own timestamptz loader (its C one, with psycopg[binary]) for this cursor only:
        # Django's is a Python subclass, a tenth of a busy worker's CPU (py-spy), and it labels
        # the session's wall-clock time with the zone set at connect instead of converting it.
        cursor.adapters.register_loader("timestamptz", TimestamptzLoader)
        if not prepare:
            cursor.prepare = False
        elif "prepare_threshold" in wrapper.settings_dict.get("OPTIONS", {}):
            cursor.prepare = None  # set in OPTIONS: the connection's own prepare_threshold decides
        elif raw.prepare_threshold is None:
            # Preparing on: statements that ask are prepared now; the project's own never are.
            raw.prepare_threshold = ONLY_WHEN_ASKED
        # Django's own wrapping of a new cursor: execute wrappers, DEBUG logging, its error classes.
        with wrapper._prepare_cursor(cursor) as wrapped:  # type: ignore[attr-defined]
            wrapped.execute(sql, params)
            # Whether rows came back, from the result's status: ``description`` would build a
            # column object per column (a twentieth of a busy worker's CPU, py-spy said).
            result = cursor.pgresult
            return list(wrapped.fetchall()) if result is not None and result.status == TUPLES_OK else []

    def lock_event_type(self, event_type: str) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["openworkflow-event:" + event_type])

    def event_waits(self, queryset: Any, payload: Any) -> list[Any]:
        # jsonb containment (@>) in SQL: only the matching waits are read. Django takes a
        # None value for SQL NULL, not JSON null: an event without a payload filters in Python.
        if payload is None:
            return super().event_waits(queryset, payload)
        return list(queryset.filter(context__match__contained_by=payload))

    def copy_rows(self, columns: list[Any], rows: list[list[Any]]) -> None:
        # COPY parses no statement per row and psycopg writes the rows in C: a multi-row
        # INSERT's text grows with its rows, and psycopg parses it again on every call.
        names = ", ".join(_q(field.column) for field in columns)
        sql = f"COPY {_q(WorkflowRun._meta.db_table)} ({names}) FROM STDIN"
        with self.connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)

    def listener(self, channels: Iterable[str], on_notify: Callable[[str, str], None]) -> PostgresListener:
        return PostgresListener(channels, on_notify, self.alias)

    def want_wakeups(self, listener: Any, channel: str, key: str, on: bool) -> bool | None:
        # openworkflow_wakeup (migration 0009) is what the notify trigger reads. A row
        # carries the listener connection's backend pid: a row whose connection is gone
        # only costs notifications nobody reads, and is dropped by the next request.
        pid = getattr(listener, "backend_pid", None)
        if pid is None or self.connection.in_atomic_block:
            return None
        with self.connection.cursor() as cursor:
            if on and channel == DUE_CHANNEL:
                # A worker's request (rare: when it turns idle) also drops every request
                # whose connection is gone; result()'s, one per wait, stays one insert.
                cursor.execute(
                    "WITH gone AS (DELETE FROM openworkflow_wakeup WHERE pid <> ALL("
                    "SELECT pid FROM pg_stat_activity)) "
                    "INSERT INTO openworkflow_wakeup (channel, key, pid) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    [channel, key, pid],
                )
            elif on:
                cursor.execute(
                    "INSERT INTO openworkflow_wakeup (channel, key, pid) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                    [channel, key, pid],
                )
            else:
                cursor.execute(
                    "DELETE FROM openworkflow_wakeup WHERE channel = %s AND key = %s AND pid = %s",
                    [channel, key, pid],
                )
        return True

    def input_index(self, action: str) -> str | None:
        # Built and dropped CONCURRENTLY: the run table stays writable meanwhile. That
        # cannot run inside a transaction, hence autocommit's own connection state.
        name = INPUT_INDEX_NAME
        if action != "status":
            if not self.connection.get_autocommit():
                raise ValueError("the input index is built or dropped outside a transaction (autocommit)")
            with self.connection.cursor() as cursor:
                cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}" if action == "drop" else INPUT_INDEX_SQL)
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT x.indisvalid, pg_relation_size(x.indexrelid) FROM pg_index x "
                "JOIN pg_class i ON i.oid = x.indexrelid WHERE i.relname = %s",
                [name],
            )
            row = cursor.fetchone()
        if row is None:
            return "absent"
        return (
            f"present, {row[1] // 1024} KiB" if row[0] else "invalid (an interrupted build: drop it, create it again)"
        )


INPUT_INDEX_NAME = "owf_run_input_gin"
INPUT_INDEX_SQL = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {INPUT_INDEX_NAME} ON openworkflow_run USING gin (input jsonb_path_ops)"
)


_CLIENTS = "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
_CONNECTION_LIMITS = f"""
SELECT 'max_connections', current_setting('max_connections')::int
         - CASE WHEN r.rolsuper THEN 0 ELSE current_setting('superuser_reserved_connections')::int END,
       ({_CLIENTS})
  FROM pg_roles r WHERE r.rolname = session_user
UNION ALL
SELECT 'the role''s CONNECTION LIMIT', r.rolconnlimit, ({_CLIENTS} AND usename = session_user)
  FROM pg_roles r WHERE r.rolname = session_user AND r.rolconnlimit >= 0 AND NOT r.rolsuper
UNION ALL
SELECT 'the database''s CONNECTION LIMIT', d.datconnlimit, ({_CLIENTS} AND datname = current_database())
  FROM pg_database d JOIN pg_roles r ON r.rolname = session_user
 WHERE d.datname = current_database() AND d.datconnlimit >= 0 AND NOT r.rolsuper
"""


@functools.cache
def _column(using: str, model: type[Model], name: str) -> tuple[str, str, Field[Any, Any]]:
    """(quoted column, SQL cast, field) of a concrete field; computed once per process."""
    field = _field(model, name)
    return _q(field.column), str(field.db_type(connections[using])), field


def _param(using: str, model: type[Model], name: str, value: Any, connection: Any = None) -> Any:
    """The value as the field saves it; ``connection`` (``connections[using]``) saves a lookup per value."""
    if value is None:  # NULL, for every field written here (a JSON null would be a Value())
        return None
    return _column(using, model, name)[2].get_db_prep_save(value, connection or connections[using])


def _assignments(using: str, model: type[Model], names: tuple[str, ...]) -> str:
    columns = (_column(using, model, name) for name in names)
    return ", ".join(f"{column} = %s::{cast}" for column, cast, _ in columns)


_ATTEMPT_COLUMNS = (
    "workflow_run_id", "step_name", "kind", "status", "output", "error",
    "context", "started_at", "finished_at", "created_at",
)  # fmt: skip
_UPDATE_COLUMNS = ("status", "output", "error", "finished_at")


@functools.lru_cache(maxsize=256)
def _commit_sql(
    using: str, run_names: tuple[str, ...], pending_kinds: tuple[bool, ...], has_insert: bool, unless_canceling: bool
) -> str:
    """The statement for one shape of commit; shapes repeat, so it is built once (and prepared by psycopg).

    ``pending_kinds`` is, per pending change, True for a new row and False
    for an update of an existing attempt. ``unless_canceling`` adds the
    fence's condition that nobody asked to cancel the run.
    """
    runs, attempts = _q(WorkflowRun._meta.db_table), _q(StepAttempt._meta.db_table)
    not_canceling = f" AND {_q('cancel_requested_at')} IS NULL" if unless_canceling else ""
    ctes = [
        f"fence AS (UPDATE {runs} SET {_assignments(using, WorkflowRun, run_names)} "
        f"WHERE {_q('id')} = %s AND {_q('worker_id')} = %s AND {_q('status')} = %s{not_canceling} RETURNING 1)"
    ]
    for i, is_new in enumerate(pending_kinds):
        if not is_new:
            sets = _assignments(using, StepAttempt, _UPDATE_COLUMNS)
            ctes.append(
                f"u{i} AS (UPDATE {attempts} SET {sets} WHERE {_q('id')} = %s AND EXISTS (SELECT 1 FROM fence))"
            )
    new_rows = sum(pending_kinds) + has_insert
    select_new = "NULL"
    if new_rows:
        # One INSERT with an explicit order gives the rows ascending ids in
        # journal order (separate CTEs would run in no defined order).
        specs = [_column(using, StepAttempt, name) for name in _ATTEMPT_COLUMNS]
        row = ", ".join(f"%s::{cast}" for _, cast, _ in specs)
        values = ", ".join(f"({row}, {position})" for position in range(new_rows))
        columns = ", ".join(column for column, _, _ in specs)
        ctes.append(
            f"ins AS (INSERT INTO {attempts} ({columns}) SELECT {columns} "
            f"FROM (VALUES {values}) AS v ({columns}, position) "
            f"WHERE EXISTS (SELECT 1 FROM fence) ORDER BY position RETURNING {_q('id')})"
        )
        # The attempt the caller waits for is the last row, hence the largest id.
        if has_insert:
            select_new = "(SELECT max(id) FROM ins)"
    return f"WITH {', '.join(ctes)} SELECT (SELECT count(*) FROM fence), {select_new}"


def _attempt_row(using: str, run_id: Any, new: NewAttempt, now: datetime) -> list[Any]:
    values = (
        run_id, new.step_name, new.kind, new.status, new.output, new.error,
        new.context, new.started_at, new.finished_at, now,
    )  # fmt: skip
    connection = connections[using]
    return [
        _param(using, StepAttempt, name, value, connection)
        for name, value in zip(_ATTEMPT_COLUMNS, values, strict=True)
    ]


class PostgresListener(threading.Thread):
    """Calls ``on_notify(channel, payload)`` for each notification on ``channels``.

    Every attribute is set before :meth:`start` and only read afterwards; the
    thread's own state (the connection, the backoff) is confined to it, and
    other threads reach it only through ``connected`` and :meth:`stop`, which
    are events.
    """

    def __init__(self, channels: Iterable[str], on_notify: Callable[[str, str], None], using: str) -> None:
        super().__init__(name="owf-listener", daemon=True)
        self.channels = list(channels)
        self.on_notify = on_notify
        self.using = using
        self.connected = threading.Event()
        # The LISTEN connection's backend pid while connected (else None): set on this
        # thread, read by others (one attribute, replaced whole); want_wakeups names it.
        self.backend_pid: int | None = None
        self._stop_event = threading.Event()
        self._connected_at = 0.0  # confined to the thread once started

    def stop(self) -> None:
        """Ask the thread to close its connection and end (within a quarter of a second)."""
        self._stop_event.set()

    def run(self) -> None:
        backoff = RECONNECT_BACKOFF[0]
        try:
            while not self._stop_event.is_set():
                try:
                    self._listen()
                except Exception as exc:
                    # Never end silently: a dropped connection, a bad setting or a failing
                    # on_notify is logged and the thread connects again. A listener that
                    # dies leaves its owner polling with nobody told why.
                    backoff = wait_to_reconnect(
                        exc,
                        backoff=backoff,
                        connected=self.connected,
                        connected_at=self._connected_at,
                        stop=self._stop_event,
                        expected=psycopg.Error,
                        what="LISTEN",
                        logger=logger,
                    )
        finally:
            self.connected.clear()
            self.backend_pid = None

    def _listen(self) -> None:
        """Listen until stopped; returns only when stopped, raises when the connection fails."""
        params = connections[self.using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("prepare_threshold", None)
        params.pop("server_side_binding", None)
        with psycopg.connect(**params, autocommit=True) as conn:
            for channel in self.channels:
                conn.execute(f'LISTEN "{channel}"')
            self._connected_at = time.monotonic()
            self.backend_pid = conn.info.backend_pid
            self.connected.set()
            # Whatever was sent while not listening is lost: report a
            # wake-up so the owner looks for work now.
            for channel in self.channels:
                self.on_notify(channel, "")
            # Wake often enough to notice stop() promptly; a reconnect follows a drop.
            while not self._stop_event.is_set():
                for note in conn.notifies(timeout=0.25):
                    self.on_notify(note.channel, note.payload)
