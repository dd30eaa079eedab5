"""The workflow tables on a database alias of their own (OPENWORKFLOW["DATABASE"])."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.testapp.models import SideEffect
from tests.testapp.workflows import atomic_write_to, three_steps

pytestmark = pytest.mark.django_db(databases=["default", "other"], transaction=True)
ON_OTHER = override_settings(OPENWORKFLOW={"DATABASE": "other", "POLL_INTERVAL": "10ms"})


@ON_OTHER
def test_runs_start_execute_and_journal_on_the_workflow_alias(run_worker):
    handle = three_steps.run({"start": 2})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"result": 21}
    assert WorkflowRun._base_manager.using("other").filter(id=handle.id).exists()
    assert not WorkflowRun._base_manager.using("default").exists()
    assert StepAttempt._base_manager.using("other").filter(workflow_run_id=handle.id).count() == 3
    assert not StepAttempt._base_manager.using("default").exists()


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
    assert error["type"] == "django_openworkflow.errors.StepUsageError"
    assert "only writes to 'other' (the workflow database) commit with the journal" in error["message"]
    assert not SideEffect.objects.using("default").filter(run_id=handle.id).exists()
