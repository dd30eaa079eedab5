"""The workflow tables on a database alias of their own (OPENWORKFLOW["DATABASE"]).

These tests run in every mode of the suite; `make test-second-db` also runs the
whole suite with the workflow tables on "other" only (tests/settings.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connections, router, transaction
from django.test import override_settings
from django.utils import timezone

from django_openworkflow.checks import check_settings, check_workflow_database
from django_openworkflow.models import ApiToken, Event, Schedule, StepAttempt, WorkflowRun
from django_openworkflow.routers import WorkflowRouter
from django_openworkflow.tables import workflow_tables
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import atomic_write_to, three_steps

pytestmark = pytest.mark.django_db(databases=["default", "other"], transaction=True)
ON_OTHER = override_settings(OPENWORKFLOW={"DATABASE": "other", "POLL_INTERVAL": "10ms"})
ROUTER = "django_openworkflow.routers.WorkflowRouter"


def rows_on(alias: str, model: Any) -> int:
    """How many rows ``model`` has on ``alias``; 0 where its table does not exist (the router kept it off)."""
    if model._meta.db_table not in connections[alias].introspection.table_names():
        return 0
    return int(model._base_manager.using(alias).count())


@ON_OTHER
def test_runs_start_execute_and_journal_on_the_workflow_alias(run_worker):
    handle = three_steps.run({"start": 2})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"result": 21}
    assert WorkflowRun._base_manager.using("other").filter(id=handle.id).exists()
    assert rows_on("default", WorkflowRun) == 0
    assert StepAttempt._base_manager.using("other").filter(workflow_run_id=handle.id).count() == 3
    assert rows_on("default", StepAttempt) == 0


@ON_OTHER
def test_an_atomic_step_commits_writes_to_the_workflow_alias_with_its_journal(run_worker):
    handle = atomic_write_to.run({"database": "other"})
    run_worker(until=lambda: handle.status() == "completed")
    assert SideEffect.objects.using("other").filter(run_id=handle.id, step="atomic").count() == 1


@ON_OTHER
def test_an_atomic_step_refuses_writes_to_another_alias(run_worker):
    handle = atomic_write_to.run({"database": "default"})
    run_worker(until=lambda: handle.status() == "failed")
    error = StepAttempt.objects.get(workflow_run_id=handle.id, status="failed").error
    assert error["type"] == "StepUsageError"
    assert "only writes to 'other' (the workflow database) commit with the journal" in error["message"]
    assert not SideEffect.objects.using("default").filter(run_id=handle.id).exists()


# The router.


@ON_OTHER
def test_the_router_sends_this_apps_models_to_the_workflow_alias_and_has_no_say_on_others():
    workflow_router = WorkflowRouter()
    for model in (WorkflowRun, StepAttempt, Event, Schedule):
        assert workflow_router.db_for_read(model) == "other"
        assert workflow_router.db_for_write(model) == "other"
    assert workflow_router.db_for_read(SideEffect) is None
    assert workflow_router.db_for_write(SideEffect) is None
    run, attempt = WorkflowRun(), StepAttempt()
    assert workflow_router.allow_relation(run, attempt) is True
    assert workflow_router.allow_relation(run, SideEffect()) is None
    assert workflow_router.allow_migrate("other", "django_openworkflow", model_name="workflowrun") is True
    assert workflow_router.allow_migrate("default", "django_openworkflow", model_name="workflowrun") is False
    assert workflow_router.allow_migrate("default", "testapp") is None
    assert workflow_router.allow_migrate("other", "auth") is None


def test_the_router_reads_the_setting_at_each_call():
    assert WorkflowRouter().db_for_write(WorkflowRun) == WorkflowRouter().db_for_read(WorkflowRun)
    with override_settings(OPENWORKFLOW={"DATABASE": "default"}):
        assert WorkflowRouter().db_for_write(WorkflowRun) == "default"
        assert WorkflowRouter().allow_migrate("default", "django_openworkflow") is True
        assert WorkflowRouter().allow_migrate("other", "django_openworkflow") is False


@ON_OTHER
@override_settings(DATABASE_ROUTERS=[ROUTER])
def test_with_the_router_a_saved_instance_and_migrate_go_to_the_workflow_alias():
    # Model.save() asks the routers, not the manager: without one, a new row would go to "default".
    run = WorkflowRun(workflow_name="saved-by-hand", available_at=timezone.now())
    run.save()
    assert run._state.db == "other"
    assert WorkflowRun._base_manager.using("other").filter(id=run.id).exists()
    assert router.allow_migrate_model("other", WorkflowRun)
    assert not router.allow_migrate_model("default", WorkflowRun)
    assert router.allow_migrate_model("default", SideEffect) and router.allow_migrate_model("other", SideEffect)


@pytest.mark.skipif(
    not settings.WORKFLOW_DATABASE, reason="only `make test-second-db` migrates the test databases with the router"
)
def test_migrate_with_the_router_creates_the_workflow_tables_on_the_workflow_alias_only():
    for model in (WorkflowRun, StepAttempt, Event, Schedule):
        assert model._meta.db_table in connections[settings.WORKFLOW_DATABASE].introspection.table_names()
        assert model._meta.db_table not in connections["default"].introspection.table_names()
    # Other apps' tables: the router has no say, so they are on both.
    assert SideEffect._meta.db_table in connections["default"].introspection.table_names()
    # The API tokens point to users: with them, on "default" only.
    assert ApiToken._meta.db_table in connections["default"].introspection.table_names()
    assert ApiToken._meta.db_table not in connections[settings.WORKFLOW_DATABASE].introspection.table_names()


@ON_OTHER
@override_settings(DATABASE_ROUTERS=[ROUTER])
def test_api_tokens_live_with_the_users_and_authenticate_requests_for_runs_on_the_workflow_alias(
    django_user_model: Any, client: Any
) -> None:
    workflow_router = WorkflowRouter()
    assert workflow_router.db_for_read(ApiToken) == workflow_router.db_for_write(ApiToken) == "default"
    assert ApiToken._meta.db_table not in workflow_tables()  # what the checks want on the workflow alias
    assert workflow_router.allow_migrate("default", "django_openworkflow", model_name="apitoken") is True
    assert workflow_router.allow_migrate("other", "django_openworkflow", model_name="apitoken") is False
    user = django_user_model.objects.create_superuser("robot")
    row, token = ApiToken.objects.create_token(user, "ci")
    assert row._state.db == "default" and row.user == user
    three_steps.run({"start": 1})
    answer = client.get("/workflows/api/runs", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200 and len(answer.json()["runs"]) == 1
    row.refresh_from_db()
    assert row.last_used_at is not None


# The system checks.


def check_ids(alias: str = "other") -> list[str]:
    return [message.id for message in check_workflow_database(alias)]


def test_no_message_with_the_workflow_tables_on_default():
    assert check_workflow_database("default") == []


@ON_OTHER
@override_settings(DATABASE_ROUTERS=[ROUTER])
def test_a_workflow_alias_of_its_own_warns_that_starts_are_no_longer_atomic_with_the_callers_writes():
    assert check_ids() == ["openworkflow.W030"]
    (warning,) = check_workflow_database("other")
    assert "OPENWORKFLOW['DATABASE'] is 'other'" in warning.msg
    assert "inside transaction.atomic() on 'default' is not atomic with your writes there" in warning.msg
    assert "it stays if your transaction rolls back" in warning.msg
    assert "transaction.atomic(using='other')" in warning.hint
    assert "openworkflow.W030" in [message.id for message in check_settings()]


@ON_OTHER
@override_settings(DATABASE_ROUTERS=[])
def test_without_the_router_the_check_says_where_the_tables_and_writes_would_go():
    assert check_ids() == ["openworkflow.W030", "openworkflow.W031"]
    missing = check_workflow_database("other")[1]
    assert "DATABASE_ROUTERS do not route django_openworkflow there" in missing.msg
    assert "writes (Model.save(), the admin's transactions) go to 'default'" in missing.msg
    assert "`migrate` also creates the workflow tables on 'default'" in missing.msg
    assert ROUTER in missing.hint


class RefuseWorkflowMigrations:
    """A project router that keeps this app's migrations off every alias."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        return False if app_label == "django_openworkflow" else None


@ON_OTHER
@override_settings(DATABASE_ROUTERS=["tests.test_routers.RefuseWorkflowMigrations", ROUTER])
def test_routers_that_keep_the_migrations_off_the_workflow_alias_are_an_error():
    assert check_ids() == ["openworkflow.W030", "openworkflow.E030"]
    error = check_workflow_database("other")[1]
    assert "`migrate --database=other` will not create the workflow tables" in error.msg


# What W030 warns about: the start commits on the workflow alias, not with the caller's transaction.


class Rollback(Exception):
    pass


@ON_OTHER
def test_a_start_inside_atomic_on_default_stays_when_that_transaction_rolls_back():
    with pytest.raises(Rollback), transaction.atomic():  # on "default"
        SideEffect.objects.create(run_id="00000000-0000-0000-0000-000000000001", step="caller")
        handle = three_steps.run()
        raise Rollback
    assert not SideEffect.objects.filter(step="caller").exists()  # the caller's write rolled back
    assert WorkflowRun.objects.filter(id=handle.id).exists()  # the run did not


@ON_OTHER
def test_a_start_inside_atomic_on_the_workflow_alias_rolls_back_with_it():
    with pytest.raises(Rollback), transaction.atomic(using="other"):
        SideEffect.objects.using("other").create(run_id="00000000-0000-0000-0000-000000000001", step="caller")
        handle = three_steps.run()
        assert WorkflowRun.objects.filter(id=handle.id).exists()
        raise Rollback
    assert not SideEffect.objects.using("other").filter(step="caller").exists()
    assert not WorkflowRun.objects.filter(id=handle.id).exists()
