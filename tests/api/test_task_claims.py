"""The API's claims: claim, release, reassign; a claimed task refuses others (409 claimed); the list's scopes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client

from django_openworkflow.models import ApiToken, Approval
from tests.conftest import is_parked
from tests.fixtures.testapp.workflows import refund_details

pytestmark = pytest.mark.django_db(transaction=True)

API = "/workflows/api"
NOTE_FORM = "tests.fixtures.testapp.forms.NoteForm"


def _token(django_user_model: Any, name: str, *groups: str, reassigns: bool = False) -> Client:
    user = django_user_model.objects.create_user(name, password="pw")
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    if reassigns:
        user.user_permissions.add(Permission.objects.get(codename="reassign_approval"))
    _, token = ApiToken.objects.create_token(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


def _post(client: Client, url: str, body: Any = None) -> Any:
    if body is None:  # a bare POST
        return client.post(f"{API}{url}", content_type="application/json")
    return client.post(f"{API}{url}", json.dumps(body), content_type="application/json")


@pytest.fixture
def task(run_worker: Any) -> tuple[Any, Approval]:
    handle = refund_details.run({"form": NOTE_FORM, "timeout": "1d", "due": "1h"})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_claim_then_another_members_submission_is_409_claimed(task, django_user_model, run_worker):
    handle, approval = task
    ada, bob = _token(django_user_model, "ada", "managers"), _token(django_user_model, "bob", "managers")
    claimed = _post(ada, f"/approvals/{approval.id}/claim")
    assert claimed.status_code == 200, claimed.content
    body = claimed.json()
    assert (body["approval_id"], body["claimed_by"]) == (approval.id, "ada")
    assert [entry["action"] for entry in body["activity"]] == ["claim"]
    refused = _post(bob, f"/approvals/{approval.id}/submit", {"data": {"note": "bob's"}})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "claimed" and "claimed by ada" in refused.json()["error"]["message"]
    assert _post(bob, f"/approvals/{approval.id}/claim", {}).json()["error"]["code"] == "claimed"
    [listed] = bob.get(f"{API}/approvals").json()["approvals"]
    assert (listed["claimed_by"], listed["overdue"]) == ("ada", False)
    assert bob.get(f"{API}/approvals?scope=groups").json()["approvals"] == []
    assert [found["id"] for found in ada.get(f"{API}/approvals?scope=mine").json()["approvals"]] == [approval.id]
    assert _post(ada, f"/approvals/{approval.id}/release").json()["claimed_by"] is None
    assert _post(bob, f"/approvals/{approval.id}/submit", {"data": {"note": "bob's"}}).status_code == 200
    run_worker(until=lambda: handle.status() == "completed")


def test_reassign_needs_the_permission(task, django_user_model):
    _, approval = task
    ada = _token(django_user_model, "ada", "managers")
    lead = _token(django_user_model, "lead", reassigns=True)
    django_user_model.objects.create_user("dave")
    refused = _post(ada, f"/approvals/{approval.id}/reassign", {"to": "dave"})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_assigned")
    unknown = _post(lead, f"/approvals/{approval.id}/reassign", {"to": "nobody"})
    assert (unknown.status_code, unknown.json()["error"]["field"]) == (400, "to")
    missing = _post(lead, f"/approvals/{approval.id}/reassign", {})
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "missing_field")
    done = _post(lead, f"/approvals/{approval.id}/reassign", {"to": "dave"})
    assert done.status_code == 200 and done.json()["claimed_by"] == "dave"
    assert Approval.objects.get(id=approval.id).assignees["users"] == ["dave"]


def test_an_unassigned_user_sees_nothing_and_may_not_claim(task, django_user_model):
    _, approval = task
    eve = _token(django_user_model, "eve", "support")
    for scope in ("all", "mine", "groups"):
        assert eve.get(f"{API}/approvals?scope={scope}").json()["approvals"] == []
    refused = _post(eve, f"/approvals/{approval.id}/claim")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_assigned")
    assert eve.get(f"{API}/approvals?scope=everything").status_code == 400
    assert eve.get(f"{API}/approvals?page=2").json()["error"]["code"] == "unknown_parameter"
    assert _post(eve, "/approvals/999999/claim").status_code == 404
