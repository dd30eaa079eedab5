"""PostgreSQL's claim statements: lock the first due runs and lease them, in one statement.

Only the text of the statements (no psycopg): ``postgresql.py`` runs them,
prepared.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db.models import Field, Model

from ...models import WorkflowRun
from ...states import CLAIMABLE_STATUSES, RunStatus
from ..queue import RUN_RECORD_FIELDS


@functools.cache
def claim_sql(one_queue: bool, fair: bool = False) -> str:
    """The claim statement: lock the first due runs, lease those free of limits, name the others.

    ``fair``: the claim of fair queues (``store/fairness.py``), which reads
    the runs that have a place in line in order of their places, through
    the partial ``owf_run_fair_claim_idx``; ``due_at`` is then the place.
    """
    table = _q(WorkflowRun._meta.db_table)
    # Literal statuses (our constants) so the planner can match the partial claim index.
    statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
    # Candidate.needs_place / needs_rate, in SQL.
    needs_admission = (
        "(due.concurrency_key IS NOT NULL AND due.worker_id IS NULL"
        f" AND (due.status = '{RunStatus.PENDING.value}' OR NOT due.concurrency_counts_parked))"
        " OR (due.rate_key IS NOT NULL AND due.started_at IS NULL)"
    )
    record = ", ".join(f"r.{_q(_field(WorkflowRun, name).column)}" for name in RUN_RECORD_FIELDS)
    nulls = ", ".join(["NULL"] * (len(RUN_RECORD_FIELDS) - 1))
    fair_at, in_line, by_place = ("", "", "") if not fair else (", fair_at", " AND fair_at IS NOT NULL", " fair_at,")
    return f"""
        WITH due AS (
            SELECT id, started_at, available_at, worker_id, status, priority,
                concurrency_key, concurrency_counts_parked, rate_key{fair_at} FROM {table}
            WHERE queue {"= %s" if one_queue else "= ANY(%s)"} AND status IN ({statuses})
                AND available_at <= statement_timestamp(){in_line}
            ORDER BY priority DESC,{by_place} available_at
            LIMIT %s
            FOR UPDATE SKIP LOCKED
        ), leased AS (
            UPDATE {table} AS r
            SET status = %s, worker_id = %s, available_at = statement_timestamp() + %s,
                started_at = COALESCE(r.started_at, statement_timestamp()), updated_at = statement_timestamp(),
                blocked_at = NULL, debounce_key = NULL
            FROM due WHERE r.id = due.id AND NOT ({needs_admission})
            RETURNING {record}, due.priority, due.started_at IS NULL AS fresh,
                due.worker_id AS held_by, due.available_at AT TIME ZONE 'UTC' AS lease_ended_at,
                due.{"fair_at" if fair else "available_at"} AS due_at,
                statement_timestamp() AT TIME ZONE 'UTC' AS claimed_at, false AS held_back
        )
        SELECT * FROM leased
        UNION ALL
        SELECT due.id, {nulls}, NULL, NULL, NULL, NULL, NULL, NULL, true FROM due WHERE {needs_admission}
    """


@functools.cache
def lease_sql() -> str:
    """``QueueOps._lease`` returning the records: status, holder, lease end, first start, update time; ids."""
    record = ", ".join(_q(_field(WorkflowRun, name).column) for name in RUN_RECORD_FIELDS)
    return (
        f"UPDATE {_q(WorkflowRun._meta.db_table)} SET status = %s, worker_id = %s, available_at = %s, "
        "started_at = COALESCE(started_at, %s), updated_at = %s, blocked_at = NULL, debounce_key = NULL "
        f"WHERE id = ANY(%s) RETURNING {record}"
    )


def _q(name: str | None) -> str:
    assert name, "a concrete column or table name"
    return f'"{name}"'


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), name  # only concrete columns are written here
    return field
