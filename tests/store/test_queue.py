"""The claim reads due runs through an index on every database, however many runs have finished."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_openworkflow.models import WorkflowRun
from django_openworkflow.states import RunStatus


def due_query_sql() -> str:
    query = WorkflowRun.objects.due(timezone.now()).order_by("available_at").values("id")[:20]
    sql, _ = query.query.sql_with_params()
    return sql


def test_claimable_statuses_are_literals_and_not_a_boolean_comparison():
    # Literals let SQLite and PostgreSQL match the partial claim index; a boolean
    # expression compared with "= 1" (what MySQL does to a RawSQL filter) keeps
    # MySQL off its (status, available_at) index.
    sql = due_query_sql()
    assert "IN ('pending', 'running') AND" in sql


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "mysql", reason="EXPLAIN's shape is MySQL's")
def test_mysql_claim_uses_the_status_index():
    long_ago = timezone.now() - timedelta(days=1)
    WorkflowRun.objects.bulk_create(
        WorkflowRun(workflow_name="done", status=RunStatus.COMPLETED, available_at=long_ago) for _ in range(3000)
    )
    WorkflowRun.objects.bulk_create(WorkflowRun(workflow_name="due", available_at=long_ago) for _ in range(5))
    tomorrow = timezone.now() + timedelta(days=1)
    WorkflowRun.objects.bulk_create(
        WorkflowRun(workflow_name="parked", status=RunStatus.RUNNING, available_at=tomorrow) for _ in range(1000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE openworkflow_run")
        cursor.fetchall()
    with transaction.atomic():
        query = WorkflowRun.objects.due(timezone.now()).order_by("available_at").select_for_update(skip_locked=True)
        sql, params = query.values("id")[:20].query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    assert plan[0]["key"] == "owf_run_claim_status_idx", plan
    assert int(plan[0]["rows"]) < 100, plan  # not a walk over the finished runs
    # The workers' claim: one queue's due runs, by priority (migration 0006's index).
    with transaction.atomic():
        due = (
            WorkflowRun.objects.due(timezone.now()).filter(queue__in=["default"]).order_by("-priority", "available_at")
        )
        sql, params = due.select_for_update(skip_locked=True).values("id")[:20].query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN " + sql, params)
            columns = [c[0] for c in cursor.description]
            plan = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    # Either index bounded by available_at will do: (queue, status, available_at) or (status, available_at).
    assert plan[0]["key"] in ("owf_run_queue_claim_status_idx", "owf_run_claim_status_idx"), plan
    assert int(plan[0]["rows"]) < 100, plan  # neither the finished runs nor the parked ones
