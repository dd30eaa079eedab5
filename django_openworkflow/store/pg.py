"""PostgreSQL fast paths: one statement per claim and per step boundary.

Data-modifying CTEs let the fence (the conditional UPDATE of the run row),
the attempt updates and the new attempt share one statement, hence one
round trip and one implicit transaction. Every CTE after the fence is
conditional on the fence having matched, so a worker that lost its lease
still writes nothing. The generic ORM path in ``journal.commit`` and
``claims.claim_due_runs`` does the same in several statements.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Field, Model

from ..models import CLAIMABLE_STATUSES, RunStatus, StepAttempt, WorkflowRun
from .records import AttemptUpdate, NewAttempt


def _q(name: str | None) -> str:
    assert name, "a concrete column or table name"
    return f'"{name}"'


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), name  # only concrete columns are written here
    return field


def _assignments(model: type[Model], values: dict[str, Any], using: str, params: list[Any]) -> str:
    """``"col" = %s::type, ...`` with each value prepared by its model field."""
    connection = connections[using]
    parts = []
    for name, value in values.items():
        field = _field(model, name)
        parts.append(f"{_q(field.column)} = %s::{field.db_type(connection)}")
        params.append(field.get_db_prep_save(value, connection))
    return ", ".join(parts)


_ATTEMPT_COLUMNS = (
    "workflow_run_id", "step_name", "kind", "status", "output", "error",
    "context", "started_at", "finished_at", "created_at",
)  # fmt: skip


def _insert_attempts(using: str, run_id: Any, rows: list[NewAttempt], now: datetime, params: list[Any]) -> str:
    """One ``INSERT ... SELECT ... ORDER BY`` for all new attempts, if the fence matched.

    A single INSERT with an explicit order gives the rows ascending ids in
    journal order (separate CTEs would run in no defined order).
    """
    connection = connections[using]
    fields = [_field(StepAttempt, name) for name in _ATTEMPT_COLUMNS]
    tuples = []
    for position, new in enumerate(rows):
        values = (
            run_id, new.step_name, new.kind, new.status, new.output, new.error,
            new.context, new.started_at, new.finished_at, now,
        )  # fmt: skip
        placeholders = []
        for field, value in zip(fields, values, strict=True):
            placeholders.append(f"%s::{field.db_type(connection)}")
            params.append(field.get_db_prep_save(value, connection))
        tuples.append(f"({', '.join(placeholders)}, {position})")
    columns = ", ".join(_q(field.column) for field in fields)
    return (
        f"INSERT INTO {_q(StepAttempt._meta.db_table)} ({columns}) "
        f"SELECT {columns} FROM (VALUES {', '.join(tuples)}) AS v ({columns}, position) "
        f"WHERE EXISTS (SELECT 1 FROM fence) ORDER BY position RETURNING {_q('id')}"
    )


def commit(
    using: str,
    run_id: Any,
    worker_id: str,
    now: datetime,
    pending: list[AttemptUpdate | NewAttempt],
    insert: NewAttempt | None,
    run_fields: dict[str, Any],
) -> int | None:
    """Fence + attempt updates + new attempts in one statement.

    Returns the id of ``insert`` (None without one), or -1 when the fence
    did not match and nothing was written.
    """
    runs, attempts = _q(WorkflowRun._meta.db_table), _q(StepAttempt._meta.db_table)
    params: list[Any] = []
    sets = _assignments(WorkflowRun, {"updated_at": now, **run_fields}, using, params)
    ctes = [
        f"fence AS (UPDATE {runs} SET {sets} WHERE {_q('id')} = %s AND {_q('worker_id')} = %s "
        f"AND {_q('status')} = %s RETURNING 1)"
    ]
    params += [run_id, worker_id, RunStatus.RUNNING.value]
    new_rows: list[NewAttempt] = []
    for i, change in enumerate(pending):
        if isinstance(change, NewAttempt):
            new_rows.append(change)
            continue
        values = {
            "status": change.status,
            "output": change.output,
            "error": change.error,
            "finished_at": change.finished_at,
        }
        sets = _assignments(StepAttempt, values, using, params)
        ctes.append(f"u{i} AS (UPDATE {attempts} SET {sets} WHERE {_q('id')} = %s AND EXISTS (SELECT 1 FROM fence))")
        params.append(change.attempt_id)
    if insert is not None:
        new_rows.append(insert)
    select_new = "NULL"
    if new_rows:
        ctes.append(f"ins AS ({_insert_attempts(using, run_id, new_rows, now, params)})")
        # The attempt the caller waits for is the last row, hence the largest id.
        select_new = "(SELECT max(id) FROM ins)" if insert is not None else "NULL"
    sql = f"WITH {', '.join(ctes)} SELECT (SELECT count(*) FROM fence), {select_new}"
    with connections[using].cursor() as cursor:
        cursor.execute(sql, params)
        held, new_id = cursor.fetchone()
    return new_id if held else -1


def claim(using: str, worker_id: str, limit: int, lease: timedelta) -> list[WorkflowRun]:
    """Claim up to ``limit`` due runs in one statement, oldest first.

    Each returned run carries ``claimed_at`` (the database clock), ``fresh``
    (never claimed before: it has no history to load) and ``lease_expired``
    (its previous holder died or stalled mid-slice).
    """
    table = _q(WorkflowRun._meta.db_table)
    # Literal statuses (our constants) so the planner can match the partial claim index.
    statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
    sql = f"""
        WITH due AS (
            SELECT id, started_at, available_at, worker_id FROM {table}
            WHERE status IN ({statuses}) AND available_at <= statement_timestamp()
            ORDER BY available_at
            LIMIT %s
            FOR UPDATE SKIP LOCKED
        )
        UPDATE {table} AS r
        SET status = %s, worker_id = %s, available_at = statement_timestamp() + %s,
            started_at = COALESCE(r.started_at, statement_timestamp()), updated_at = statement_timestamp()
        FROM due WHERE r.id = due.id
        RETURNING r.*, due.started_at IS NULL AS fresh, due.worker_id IS NOT NULL AS lease_expired,
            due.available_at AS due_at,
            statement_timestamp() AS claimed_at
    """
    runs = list(WorkflowRun.objects.using(using).raw(sql, [limit, RunStatus.RUNNING.value, worker_id, lease]))
    runs.sort(key=lambda run: run.due_at)  # type: ignore[attr-defined]
    return runs
