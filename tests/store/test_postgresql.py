"""PostgreSQL: the engine's frequent statements are prepared, the project's own are not, and OPTIONS can say no."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import connections
from django.utils import timezone

from django_openworkflow.conf import owf_settings
from django_openworkflow.models import WorkflowRun
from django_openworkflow.states import RunStatus
from django_openworkflow.testing import drain

if connections[owf_settings.database].vendor == "postgresql":
    from django_openworkflow.store.backends.postgresql import _claim_sql
from tests.fixtures.testing_workflows import greet

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connections[owf_settings.database].vendor != "postgresql", reason="prepared statements are PostgreSQL's"
    ),
]


def prepared() -> list[str]:
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def fresh_connection() -> Iterator[None]:
    """A new server session, so that only this test's statements are prepared on it."""
    connection = connections[owf_settings.database]
    connection.close()
    yield
    connection.close()


def test_starts_claims_and_step_boundaries_are_prepared(fresh_connection: None) -> None:
    handles = [greet.run({"name": name}) for name in ("a", "b", "c")]
    drain()
    assert [handle.result() for handle in handles] == [{"greeting": f"hello {name}"} for name in ("a", "b", "c")]
    statements = prepared()
    assert any(s.startswith('INSERT INTO "openworkflow_run"') for s in statements), statements
    assert any("WITH fence AS" in s for s in statements), statements
    assert any("WITH due AS" in s for s in statements), statements
    # Each is prepared once, however many runs used it.
    assert len(statements) == len(set(statements)), statements
    # The project's own queries stay unprepared, even bound server-side as with Django's
    # OPTIONS["server_side_binding"] (psycopg would prepare them after a few runs).
    for _ in range(10):
        assert WorkflowRun.objects.filter(status=RunStatus.COMPLETED).count() == 3
    connection = connections[owf_settings.database]
    for _ in range(10):
        with psycopg.Cursor(connection.connection) as cursor:
            cursor.execute("SELECT COUNT(*) FROM openworkflow_run WHERE status = %s", [RunStatus.COMPLETED.value])
            assert cursor.fetchone() == (3,)
    assert not [s for s in prepared() if "COUNT(*)" in s]


def test_only_inserts_whose_size_comes_again_are_prepared(fresh_connection: None) -> None:
    # One run per statement (a start) is prepared; seven rows, a size that may never come
    # again, is not: preparing it would only push statements out of psycopg's cache.
    greet.run({"name": "one"})
    greet.run_many([{"name": str(n)} for n in range(7)])
    inserts = [s for s in prepared() if s.startswith('INSERT INTO "openworkflow_run"')]
    assert len(inserts) == 1, inserts
    assert inserts[0].count("), (") == 0, inserts


def test_prepare_threshold_in_options_decides(fresh_connection: None) -> None:
    connection = connections[owf_settings.database]
    options = connection.settings_dict.setdefault("OPTIONS", {})
    options["prepare_threshold"] = None  # what a project behind an old PgBouncer sets
    try:
        handle = greet.run({"name": "a"})
        drain()
        assert handle.result() == {"greeting": "hello a"}
        assert prepared() == []
    finally:
        del options["prepare_threshold"]


@pytest.mark.parametrize(("fair", "index"), [(False, "owf_run_queue_claim_idx"), (True, "owf_run_fair_claim_idx")])
def test_the_prepared_claims_generic_plan_reads_the_claim_index(fair: bool, index: str) -> None:
    # PostgreSQL may keep one generic plan for a prepared statement; it must still walk the
    # claim index (the fair claim's own, in a fair queue), not every finished run, and not sort.
    long_ago = timezone.now() - timedelta(days=1)
    WorkflowRun.objects.bulk_create(
        WorkflowRun(workflow_name="done", status=RunStatus.COMPLETED, available_at=long_ago) for _ in range(5000)
    )
    WorkflowRun.objects.bulk_create(
        WorkflowRun(workflow_name="due", available_at=long_ago, fairness_key="k", fair_at=long_ago) for _ in range(5)
    )
    numbered = iter(range(1, 10))
    sql = re.sub("%s", lambda _: f"${next(numbered)}", _claim_sql(True, fair))
    with connections[owf_settings.database].cursor() as cursor:
        # The tests before this one on the same database leave dead rows and bloated indexes behind
        # (a flush DELETEs); with a handful of due runs, the planner then preferred another index and
        # a sort, depending on which tests ran before. Rebuilt and vacuumed, the table is as fresh.
        cursor.execute("REINDEX TABLE openworkflow_run")
        cursor.execute("VACUUM ANALYZE openworkflow_run")
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE owf_claim_plan (text, bigint, text, text, interval) AS {sql}")
        try:
            cursor.execute("EXPLAIN EXECUTE owf_claim_plan ('default', 20, 'running', 'w', '30 seconds')")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("DEALLOCATE owf_claim_plan")
            cursor.execute("RESET plan_cache_mode")
    assert index in plan, plan
    assert "Seq Scan on openworkflow_run" not in plan, plan
    assert "Sort" not in plan, plan


# The indexes a run without concurrency or rate keys, parent, predecessor, source run, subject or
# children pays for at each claim and finish (an UPDATE that is not HOT writes to each). A new index
# on these tables belongs here only if every run needs it; else it is partial (0009, 0019, 0026).
EVERY_RUN_PAYS_FOR = {
    "openworkflow_run": {
        "openworkflow_run_pkey",
        "owf_run_created_idx",
        "owf_run_name_idx",
        "owf_run_status_idx",
        "owf_run_status_worker_idx",
    },
    "openworkflow_step_attempt": {
        "openworkflow_step_attempt_pkey",
        "openworkflow_step_attempt_workflow_run_id_19740040",
        "owf_step_run_idx",
    },
}


@pytest.mark.parametrize("table", sorted(EVERY_RUN_PAYS_FOR))
def test_indexes_without_a_condition_are_the_ones_every_run_needs(table: str) -> None:
    # Partial indexes test a column for NULL (the common run has no entry) or a status (the claim's,
    # which a finished run leaves).
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute(
            "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "WHERE x.indrelid = %s::regclass AND x.indpred IS NULL",
            [table],
        )
        whole = {name for (name,) in cursor.fetchall()}
    assert whole == EVERY_RUN_PAYS_FOR[table]


def test_a_claim_reads_its_times_as_instants_in_whatever_zone_the_session_is(fresh_connection: None) -> None:
    """A session whose zone changed after connecting (a pooler's, a project's SET) reads no hours off.

    Django's timestamptz loader labels the session's wall-clock time with the
    zone set at connect; the engine's statements load with psycopg's, which converts.
    """
    from django_openworkflow.store import get_backend

    greet.run({"name": "tokyo"})
    connection = connections[owf_settings.database]
    with connection.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Tokyo'")
    before = timezone.now()
    [claimed] = get_backend().claim("tz-worker", 1, timedelta(seconds=30))
    after = timezone.now()
    # started_at is read as the column's timestamptz (claimed_at is converted to UTC in SQL).
    assert before - timedelta(seconds=5) <= claimed.run.started_at <= after + timedelta(seconds=5)
