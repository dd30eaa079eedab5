"""The admin's Inbox and the API's approvals: who sees and decides what, the first decision wins, French."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.test import Client

from django_openworkflow.models import ApiToken, Approval, Signal
from tests.admin.test_i18n import left_in_english, localized  # noqa: F401  (a fixture)
from tests.conftest import is_parked
from tests.fixtures.testapp.workflows import refund

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = "/admin/django_openworkflow/approval/"
API = "/workflows/api"


def _login(django_user_model: Any, name: str, *groups: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    client = Client()
    client.force_login(user)
    return client


def _token(django_user_model: Any, name: str, *groups: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw")
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    _, token = ApiToken.objects.create_token(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


@pytest.fixture
def opened(run_worker: Any) -> tuple[Any, Approval]:
    handle = refund.run({"amount": 120, "order": 42})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_the_inbox_and_the_api_show_the_runs_subject(run_worker, django_user_model):
    from tests.fixtures.testapp.models import Order

    order = Order.objects.create(reference="A-7")
    handle = refund.run({"amount": 5}, subject=order)
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    page = _login(django_user_model, "ada", "managers").get(INBOX).content.decode()
    assert f"testapp.order:{order.pk}" in page
    listed = _token(django_user_model, "tom", "managers").get(f"{API}/approvals").json()["approvals"]
    assert [row["subject"] for row in listed] == [{"type": "testapp.order", "id": str(order.pk)}]


def test_the_inbox_shows_a_member_the_approval_with_its_runs_context(opened, django_user_model):
    handle, approval = opened
    page = _login(django_user_model, "ada", "managers").get(INBOX).content.decode()
    assert "Refund 120 EUR" in page and "refund" in page and str(handle.id) in page
    assert f"/admin/django_openworkflow/workflowrun/{handle.id}/change/" not in page  # no view permission on runs
    viewer = _login(django_user_model, "vic", "managers")
    user = django_user_model.objects.get(username="vic")
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    assert f"/admin/django_openworkflow/workflowrun/{handle.id}/change/" in viewer.get(INBOX).content.decode()
    assert "&quot;order&quot;:42" in page  # the input's summary
    assert f'action="{INBOX}{approval.id}/decide/"' in page
    outsider = _login(django_user_model, "eve", "interns").get(INBOX).content.decode()
    assert "Refund 120 EUR" not in outsider and "no open approval is assigned to you" in outsider


def test_approve_from_the_inbox_then_a_second_decision_is_told(opened, django_user_model, run_worker):
    handle, approval = opened
    ada = _login(django_user_model, "ada", "managers")
    answer = ada.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve", "comment": "fine"}, follow=True)
    assert answer.redirect_chain == [(INBOX, 302)] and "Approved." in answer.content.decode()
    bob = _login(django_user_model, "bob", "managers")
    again = bob.post(f"{INBOX}{approval.id}/decide/", {"decision": "reject"}, follow=True).content.decode()
    assert "This approval was already decided by ada: the first decision counts." in again
    assert Signal.objects.count() == 1 and LogEntry.objects.get().user.username == "ada"
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["comment"] == "fine"


def test_an_outsider_posting_a_decision_gets_403_and_nothing_is_delivered(opened, django_user_model):
    _, approval = opened
    eve = _login(django_user_model, "eve", "interns")
    assert eve.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve"}).status_code == 403
    assert eve.get(f"{INBOX}{approval.id}/decide/").status_code == 405
    assert Approval.objects.get().status == "open" and not Signal.objects.exists() and not LogEntry.objects.exists()


def test_the_decision_form_needs_the_csrf_token(opened, django_user_model):
    _, approval = opened
    client = Client(enforce_csrf_checks=True)
    client.force_login(django_user_model.objects.create_user("ada", password="pw", is_staff=True))
    assert client.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve"}).status_code == 403
    assert Approval.objects.get().status == "open"


def test_the_api_lists_and_decides_with_the_same_rules(opened, django_user_model):
    handle, approval = opened
    ada, eve = _token(django_user_model, "ada", "managers"), _token(django_user_model, "eve")
    [listed] = ada.get(f"{API}/approvals").json()["approvals"]
    assert (listed["id"], listed["run_id"], listed["workflow"], listed["details"]) == (
        approval.id, str(handle.id), "refund", "Refund 120 EUR"
    )  # fmt: skip
    assert eve.get(f"{API}/approvals").json() == {"approvals": []}
    url = f"{API}/approvals/{approval.id}/decide"

    def post(client: Client, body: Any) -> Any:
        return client.post(url, json.dumps(body), content_type="application/json")

    refused = post(eve, {"approved": True})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_assigned")
    assert post(ada, {"approved": "yes"}).json()["error"]["field"] == "approved"
    assert Client().post(url, "{}", content_type="application/json").status_code == 401
    decided = post(ada, {"approved": False, "comment": "no"})
    assert decided.status_code == 200 and decided.json()["decision"]["by"] == "ada"
    second = post(_token(django_user_model, "bob", "managers"), {"approved": True})
    assert (second.status_code, second.json()["error"]["code"]) == (409, "already_decided")
    assert f"approval {approval.id} was already rejected by ada at " in second.json()["error"]["message"]
    missing = ada.post(
        f"{API}/approvals/999999/decide", json.dumps({"approved": True}), content_type="application/json"
    )
    assert missing.status_code == 404
    assert Signal.objects.count() == 1


def test_the_inbox_in_french_leaves_no_english(opened, django_user_model, localized):  # noqa: F811
    client = _login(django_user_model, "ada", "managers")
    # The approval's name, details, the run's workflow and the user's name are data, not English.
    left = [t for t in left_in_english(client, INBOX) if "refund" not in t.lower() and t != "ada"]
    assert left == [], left
    # The column of the run is a workflow run's word, not the step kind's (French tells them apart).
    assert "<th>Exécution</th>" in client.get(INBOX, HTTP_ACCEPT_LANGUAGE="fr").content.decode()


def test_the_run_page_says_it_waits_for_an_approval_and_offers_no_signal_for_it(opened, admin_client):
    handle, _ = opened
    page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{handle.id}/change/").content.decode()
    assert "waiting for approval &#x27;refund&#x27;" in page
    assert "the run waits for it" not in page  # no "Send signal 'refund'" form: only a decision reaches the wait


def test_the_inbox_counts_sign_offs_and_drops_an_approval_its_user_signed_or_is_excluded_from(
    run_worker, django_user_model
):
    handle = refund.run({"amount": 9, "required": 2, "exclude": ["user:eve"]})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    approval = Approval.objects.get(workflow_run_id=handle.id)
    ada, bob = _login(django_user_model, "ada", "managers"), _login(django_user_model, "bob", "managers")
    eve = _login(django_user_model, "eve", "managers")
    assert "approvals: 0 of 2" in ada.get(INBOX).content.decode()
    assert "Refund 9 EUR" not in eve.get(INBOX).content.decode()
    assert eve.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve"}).status_code == 403
    answer = ada.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve"}, follow=True).content.decode()
    assert "Approved: 1 more approval is needed before the run goes on." in answer
    assert "Refund 9 EUR" not in answer  # ada signed off: nothing left for her to decide
    assert "approvals: 1 of 2 (ada)" in bob.get(INBOX).content.decode() and not Signal.objects.exists()
    bob.post(f"{INBOX}{approval.id}/decide/", {"decision": "approve"})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["approvers"] == ["ada", "bob"]
