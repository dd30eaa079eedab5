"""The Inbox's views and buttons: Mine, My groups' tasks, All I may see, with counts; claim, release, reassign."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.utils import translation

from django_openworkflow.models import Approval, Signal
from django_openworkflow.testing import advance
from tests.conftest import CEILING, ROOT, is_parked
from tests.fixtures.testapp.workflows import refund

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = "/admin/django_openworkflow/approval/"


def _login(django_user_model: Any, name: str, *groups: str, reassigns: bool = False) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    if reassigns:
        user.user_permissions.add(Permission.objects.get(codename="reassign_approval"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def two(run_worker: Any) -> list[Approval]:
    """Two open approvals for the managers: the second one is overdue."""
    handles = [refund.run({"amount": 1, "timeout": "1d"}), refund.run({"amount": 2, "timeout": "1d", "due": "1h"})]
    run_worker(until=lambda: Approval.objects.count() == 2 and all(is_parked(handle) for handle in handles))
    advance("2h")
    return [Approval.objects.get(workflow_run_id=handle.id) for handle in handles]


def _ids(response: Any) -> list[int]:
    return [row["approval"].id for row in response.context["rows"]]


def test_claim_moves_a_task_from_my_groups_to_mine_and_others_see_who_holds_it(two, django_user_model):
    first, overdue = two
    ada, bob = _login(django_user_model, "ada", "managers"), _login(django_user_model, "bob", "managers")
    page = ada.get(INBOX)
    assert _ids(page) == [overdue.id, first.id]  # the overdue first
    assert [(tab["scope"], tab["count"]) for tab in page.context["tabs"]] == [("mine", 0), ("groups", 2), ("all", 2)]
    assert b"owf-overdue" in page.content and b'value="claim"' in page.content
    response = ada.post(f"{INBOX}{first.id}/claim/", {"action": "claim", "scope": "groups"})
    assert response.status_code == 302 and response["Location"] == f"{INBOX}?scope=groups"
    assert _ids(ada.get(f"{INBOX}?scope=mine")) == [first.id]
    assert _ids(bob.get(f"{INBOX}?scope=groups")) == [overdue.id]
    seen = bob.get(INBOX)
    assert "claimed by ada" in seen.content.decode() and "ada is working on it." in seen.content.decode()
    refused = bob.post(f"{INBOX}{first.id}/decide/", {"decision": "approve"}, follow=True)
    assert (
        "This task is held by ada: only they may decide it" in refused.content.decode() and not Signal.objects.exists()
    )
    bob.post(f"{INBOX}{first.id}/claim/", {"action": "release"})
    assert Approval.objects.get(id=first.id).claimed_by == "ada"  # bob may not release ada's
    ada.post(f"{INBOX}{first.id}/claim/", {"action": "release"})
    assert Approval.objects.get(id=first.id).claimed_by == ""
    assert [entry.change_message for entry in LogEntry.objects.order_by("id")] == [
        "Claimed 'refund' (django-openworkflow)",
        "Released 'refund' (held by ada) (django-openworkflow)",
    ]


def test_reassign_from_the_inbox_needs_the_permission(two, django_user_model):
    first, _ = two
    ada = _login(django_user_model, "ada", "managers")
    lead = _login(django_user_model, "lead", "managers", reassigns=True)
    django_user_model.objects.create_user("dave")
    assert b'value="reassign"' not in ada.get(INBOX).content
    assert ada.post(f"{INBOX}{first.id}/claim/", {"action": "reassign", "to": "dave"}).status_code == 403
    assert b'value="reassign"' in lead.get(INBOX).content
    lead.post(f"{INBOX}{first.id}/claim/", {"action": "reassign", "to": "dave"})
    assert Approval.objects.get(id=first.id).claimed_by == "dave"
    assert lead.get(f"{INBOX}{first.id}/claim/").status_code == 405
    assert lead.post(f"{INBOX}{first.id}/claim/", {"action": "steal"}).status_code == 404


def test_an_unassigned_user_sees_nothing_in_any_view(two, django_user_model):
    eve = _login(django_user_model, "eve", "support")
    for scope in ("mine", "groups", "all"):
        page = eve.get(f"{INBOX}?scope={scope}")
        assert _ids(page) == [] and [tab["count"] for tab in page.context["tabs"]] == [0, 0, 0]
    assert eve.post(f"{INBOX}{two[0].id}/claim/", {"action": "claim"}).status_code == 403


def test_the_run_pages_journal_shows_who_holds_the_task_and_every_claim(two, django_user_model, admin_client):
    first, _ = two
    ada = _login(django_user_model, "ada", "managers")
    ada.post(f"{INBOX}{first.id}/claim/", {"action": "claim"})
    ada.post(f"{INBOX}{first.id}/claim/", {"action": "release"})
    ada.post(f"{INBOX}{first.id}/claim/", {"action": "claim"})
    page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{first.workflow_run_id}/change/").content.decode()
    assert page.count("claimed by ada") == 3 and page.count("released by ada") == 1  # the holder, then 2 claims


def test_the_navigation_counts_the_inbox_with_the_workflow_admin_site(two, django_user_model, rf):
    """WorkflowAdminSite: "Inbox (2, 1 overdue)" for a manager, on the index and in every page's sidebar."""
    from django_openworkflow.admin.approvals import ApprovalAdmin
    from django_openworkflow.admin_site import WorkflowAdminSite

    site = WorkflowAdminSite(name="counted")
    site.register(Approval, ApprovalAdmin)
    manager = django_user_model.objects.create_user("ada", is_staff=True)
    manager.groups.add(Group.objects.get_or_create(name="managers")[0])
    outsider = django_user_model.objects.create_user("eve", is_staff=True)

    def entry(user: Any) -> str:
        request = rf.get("/admin/")
        request.user = user
        (app,) = site.get_app_list(request)
        (model,) = app["models"]
        return str(model["name"])

    assert entry(manager) == "Inbox (2, 1 overdue)"
    assert entry(outsider) == "Inbox"  # nothing for eve: the plain name
    with translation.override("fr"):
        assert entry(manager).endswith(" (2, dont 1 en retard)")
    two[1].delete()  # the overdue one gone: the count alone
    assert entry(manager) == "Inbox (1)"
    request = rf.get("/admin/")
    request.user = manager
    assert site.each_context(request)["available_apps"][0]["models"][0]["name"] == "Inbox (1)"  # the sidebar's list


def test_the_workflow_admin_config_makes_the_counting_site_the_one_the_modeladmins_are_on():
    """The example project's INSTALLED_APPS: Django's default site is WorkflowAdminSite, made once, with the Inbox."""
    check = (
        "import django; django.setup(); from django.contrib import admin;"
        "from django_openworkflow.models import Approval, WorkflowRun;"
        "print(type(admin.site._wrapped).__name__, admin.site.is_registered(Approval), "
        "admin.site.is_registered(WorkflowRun))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "example_project.settings", "PYTHONPATH": str(ROOT)}
    env["DATABASE_URL"] = "sqlite:///:memory:"
    done = subprocess.run(
        [sys.executable, "-c", check], env=env, cwd=ROOT, capture_output=True, text=True, timeout=CEILING
    )
    assert done.stdout.split() == ["WorkflowAdminSite", "True", "True"], done.stderr
