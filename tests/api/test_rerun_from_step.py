"""``POST /runs/{id}/rerun`` with ``{"from_step": ...}``: the new run, its link, its copied steps, and refusals."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_openworkflow.models import WorkflowRun
from django_openworkflow.testing import drain
from tests.api.test_views import API, error_of, make_user, post, written
from tests.fixtures.rerun_workflows import C_BROKEN, rerun_abc, rerun_parent
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client(django_user_model: Any) -> Client:
    """Logged in as a user who may read runs and start them (re-running needs "add")."""
    client = Client()
    client.force_login(make_user(django_user_model, "view", "add"))
    return client


def test_rerun_from_a_step_answers_the_new_run_with_its_link_and_copied_steps(client: Client) -> None:
    SideEffect.objects.create(run_id=C_BROKEN, step="c-broken")
    source = rerun_abc.run()
    drain()
    SideEffect.objects.filter(run_id=C_BROKEN).delete()
    answer = post(client, f"/runs/{source.id}/rerun", {"from_step": "b"})
    assert answer.status_code == 201
    run = answer.json()["run"]
    assert (run["rerun_of"], run["rerun_from_step"], run["status"]) == (str(source.id), "b", "pending")
    drain()
    steps = client.get(f"{API}/runs/{run['id']}/steps").json()["steps"]
    assert [(step["step"], step["copied_from"] is not None) for step in steps] == [
        ("a", True),
        ("b", False),
        ("c", False),
    ]
    assert client.get(f"{API}/runs/{run['id']}").json()["run"]["status"] == "completed"
    plain = post(client, f"/runs/{source.id}/rerun", {"from_step": None})
    assert plain.status_code == 201 and plain.json()["run"]["rerun_from_step"] is None
    assert plain.json()["run"]["rerun_of"] == str(source.id)
    bare = client.generic("POST", f"{API}/runs/{source.id}/rerun")  # no body at all: a plain re-run
    assert bare.status_code == 201 and bare.json()["run"]["rerun_from_step"] is None


def test_rerun_from_a_step_that_cannot_be_replayed_is_a_409_and_bad_input_a_400(client: Client) -> None:
    source = rerun_parent.run()
    drain()
    before = written()
    refused = post(client, f"/runs/{source.id}/rerun", {"from_step": "b"})
    assert refused.status_code == 409
    assert "step 'rerun-leaf' before it started child run" in error_of(refused)["message"]
    unknown = post(client, f"/runs/{source.id}/rerun", {"from_step": "zz"})
    assert unknown.status_code == 409 and "it has no step 'zz'" in error_of(unknown)["message"]
    wrong_type = post(client, f"/runs/{source.id}/rerun", {"from_step": 3})
    assert wrong_type.status_code == 400 and error_of(wrong_type)["field"] == "from_step"
    extra = post(client, f"/runs/{source.id}/rerun", {"from": "b"})
    assert extra.status_code == 400 and error_of(extra)["code"] == "unknown_field"
    form = client.post(f"{API}/runs/{source.id}/rerun", {"from_step": "a"})  # a form, not JSON
    assert form.status_code == 415
    assert written() == before
    assert not WorkflowRun.objects.filter(rerun_of=source.id).exists()
