"""The API's run object: ``display_status`` next to ``status``, in a run and in a list."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from django_openworkflow.testing import drain
from tests.fixtures.testapp.workflows import approval, keeps_failing, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

API = "/workflows/api"


@pytest.fixture
def client(django_user_model: Any) -> Client:
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    client = Client()
    client.force_login(user)
    return client


def test_display_status_tells_retrying_and_waiting_runs_apart(client: Client) -> None:
    retrying = keeps_failing.run()
    waiting = approval.run()
    pending = three_steps.run()
    drain(skip_sleeps=False, run_ids=[retrying.id, waiting.id])
    run = client.get(f"{API}/runs/{retrying.id}").json()["run"]
    assert (run["status"], run["display_status"]) == ("parked", "retrying")
    assert run["error"]["retry"] == {"scope": "step", "failures": 1, "max_attempts": 10}
    listed = {run["id"]: run for run in client.get(f"{API}/runs").json()["runs"]}
    assert {key: (run["status"], run["display_status"]) for key, run in listed.items()} == {
        str(retrying.id): ("parked", "retrying"),
        str(waiting.id): ("parked", "waiting"),
        str(pending.id): ("pending", "pending"),
    }
    found = client.get(f"{API}/runs", {"status": "waiting"}).json()["runs"]
    assert [run["id"] for run in found] == [str(waiting.id)]
