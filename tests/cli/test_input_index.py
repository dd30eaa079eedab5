"""``workflows input-index`` and the run table migration 0009 leaves on PostgreSQL."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from django_openworkflow.conf import owf_settings
from django_openworkflow.models import WorkflowRun
from tests.fixtures.testapp.workflows import three_steps

postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="the GIN index is PostgreSQL's")


def input_index(*args: str) -> str:
    out = StringIO()
    call_command("workflows", "input-index", *args, stdout=out)
    return out.getvalue().strip()


def definitions() -> dict[str, str]:
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'openworkflow_run'")
        return dict(cursor.fetchall())


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_create_and_drop_the_input_index() -> None:
    assert input_index() == "owf_run_input_gin: absent"  # migration 0009 dropped it
    assert input_index("create").startswith("owf_run_input_gin: present, ")
    assert "gin (input jsonb_path_ops)" in definitions()["owf_run_input_gin"]
    assert json.loads(input_index("status", "--json"))["state"].startswith("present")
    three_steps.run({"x": 1})
    assert WorkflowRun.objects.filter(input__contains={"x": 1}).count() == 1
    assert input_index("drop") == "owf_run_input_gin: absent"
    # Without the index, the search still finds the run (it scans).
    assert WorkflowRun.objects.filter(input__contains={"x": 1}).count() == 1


@postgres_only
@pytest.mark.django_db(transaction=False)
def test_create_refuses_inside_a_transaction() -> None:
    with pytest.raises(CommandError, match="outside a transaction"):
        input_index("create")


@pytest.mark.skipif(connection.vendor == "postgresql", reason="PostgreSQL has the index")
@pytest.mark.django_db
def test_other_databases_say_they_have_no_such_index() -> None:
    with pytest.raises(CommandError, match="only PostgreSQL"):
        input_index()


@postgres_only
@pytest.mark.django_db
def test_the_run_table_is_built_for_updates_in_place() -> None:
    found = definitions()
    partial = {
        "owf_run_concurrency_idx": "concurrency_key IS NOT NULL",
        "owf_run_blocked_idx": "blocked_at IS NOT NULL",
        "owf_run_rate_idx": "rate_key IS NOT NULL",
        "owf_run_retention_idx": "finished_at IS NOT NULL",
        "owf_run_finished_idx": "finished_at IS NOT NULL",
    }
    for name, condition in partial.items():
        assert found[name].endswith(f"WHERE ({condition})"), found[name]
    foreign_keys = [definition for definition in found.values() if "_id IS NOT NULL" in definition]
    # parent_step_attempt_id, continued_from_id (0009); rerun_of_id (0019)
    assert len(foreign_keys) == 3, foreign_keys
    assert "owf_run_input_gin" not in found
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'openworkflow_run'")
        assert cursor.fetchone()[0] == ["fillfactor=80"]
