"""The CLI as an operator meets it: one JSON shape for a run (the API's), durations, rerun, "did you mean"."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.core.management import CommandError

from django_openworkflow import get_run
from django_openworkflow.models import WorkflowRun
from tests.cli.test_workflows import as_json, make_run, workflows
from tests.fixtures.testapp.workflows import three_steps

API = "/workflows/api"


@pytest.mark.django_db
def test_a_run_has_one_json_shape_in_the_cli_and_the_api(admin_client: Any) -> None:
    started = as_json("start", "three-steps", "--input", '{"start": 4}')
    run_id = started.pop("id")
    assert started.pop("created") is True
    api_run = admin_client.get(f"{API}/runs/{run_id}").json()["run"]
    shown = as_json("show", run_id)
    steps = shown.pop("steps")
    assert steps == admin_client.get(f"{API}/runs/{run_id}/steps").json()["steps"] == []
    assert {"id": run_id, **started} == shown == api_run
    listed = as_json("list")
    assert listed == admin_client.get(f"{API}/runs").json()["runs"]
    without_payloads = {key: value for key, value in api_run.items() if key not in ("input", "output", "error")}
    assert listed == [without_payloads]
    canceled = as_json("cancel", run_id)
    assert canceled == admin_client.get(f"{API}/runs/{run_id}").json()["run"] and canceled["status"] == "canceled"


@pytest.mark.django_db(transaction=True)
def test_show_json_names_a_steps_durable_key_step_as_the_api_and_step_record_do(run_worker: Any) -> None:
    handle = three_steps.run({"start": 1})
    run_worker()
    steps = as_json("show", str(handle.id))["steps"]
    assert [step["step"] for step in steps] == [record.step for record in handle.steps()] == ["one", "two", "three"]
    with pytest.warns(DeprecationWarning, match=r"StepRecord.name is deprecated; use StepRecord.step"):
        assert handle.steps()[0].name == "one"


@pytest.mark.django_db
@pytest.mark.parametrize("timeout", ["1s", "1 sec", "1000ms", "1"])
def test_start_wait_takes_a_duration_as_the_other_options_do(timeout: str) -> None:
    with pytest.raises(CommandError, match=r"did not finish within 1 s \(it goes on; is a worker running\?\)"):
        workflows("start", "three-steps", "--wait", "--timeout", timeout)


@pytest.mark.django_db
def test_start_wait_names_a_bad_duration() -> None:
    with pytest.raises(CommandError, match=r"argument --timeout: .*'soon'.* \(write it as 30s, 2m or 1h30m\)"):
        workflows("start", "three-steps", "--wait", "--timeout", "soon")
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
def test_rerun_starts_a_new_run_with_the_same_input() -> None:
    failed = make_run(workflow_name="versioned", version="v1", status="failed", input={"order": 7})
    text = workflows("rerun", str(failed.id)[:8])
    new = WorkflowRun.objects.exclude(id=failed.id).get()
    assert text.strip() == f"Started run {new.id} of versioned, a re-run of run {failed.id}."
    assert (new.workflow_name, new.version, new.input, new.status) == ("versioned", "v1", {"order": 7}, "pending")
    data = as_json("rerun", str(failed.id))
    assert data["id"] != str(new.id) and data["input"] == {"order": 7} and data["status"] == "pending"
    failed.refresh_from_db()
    assert failed.status == "failed"  # the source run stays as it was


@pytest.mark.django_db
def test_rerun_is_refused_for_a_version_this_process_does_not_have() -> None:
    gone = make_run(workflow_name="versioned", version="v0", status="failed")
    with pytest.raises(
        CommandError, match=r"cannot rerun run .*: this process has no workflow 'versioned' version 'v0'"
    ):
        workflows("rerun", str(gone.id))
    with pytest.raises(CommandError, match="no workflow run with id"):
        workflows("rerun", str(uuid.uuid4()))
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        # The closest first; other tests' workflows may follow it.
        (["three-step"], "no workflow named 'three-step' is registered; did you mean 'three-steps'"),
        (["Versioned"], "no workflow named 'Versioned' is registered; did you mean 'versioned'"),
        (
            ["versioned", "--version", "v9"],
            "no workflow 'versioned' with version 'v9' is registered; its versions: 'v1', 'v2'",
        ),
        (["zzzzzzzzzzzzzzzzzzzzzz"], "no workflow named 'zzzzzzzzzzzzzzzzzzzzzz' is registered; registered: '"),
    ],
)
def test_an_unknown_workflow_gets_a_suggestion(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as raised:
        workflows("start", *args)
    assert str(raised.value).startswith(message)
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
def test_the_api_names_the_workflow_it_does_not_know(admin_client: Any) -> None:
    body = json.dumps({"workflow": "three-step"})
    response = admin_client.post(f"{API}/runs", body, content_type="application/json")
    assert response.status_code == 404
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unknown_workflow", "workflow")
    assert error["message"].startswith("no workflow named 'three-step' is registered; did you mean 'three-steps'")
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
def test_get_run_status_of_a_started_run_is_the_cli_status() -> None:
    run_id = as_json("start", "three-steps")["id"]
    assert get_run(run_id).status() == as_json("show", run_id)["status"] == "pending"
