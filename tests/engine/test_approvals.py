"""``ctx.wait_for_approval``: deciding delivers once, to the run, as its assignees may; timeouts; real workers."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.core import mail
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from django_openworkflow import workflow
from django_openworkflow.client.approvals import approvals_for, decide_approval
from django_openworkflow.engine.approvals import parse_assignees
from django_openworkflow.errors import ApprovalClosed, ApprovalNotAssigned, StepUsageError
from django_openworkflow.models import Approval, Signal, StepAttempt
from tests.conftest import CEILING, is_parked, race, wait_until
from tests.fixtures.testapp.workflows import refund

pytestmark = pytest.mark.django_db(transaction=True)


def _user(django_user_model: Any, name: str, *groups: str, email: str = "") -> Any:
    user = django_user_model.objects.create_user(name, email=email, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def _opened(run_worker: Any, inp: dict[str, Any] | None = None) -> tuple[Any, Approval]:
    """A refund run parked on its approval (run by an in-process worker)."""
    handle = refund.run({"amount": 120, **(inp or {})})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_a_group_member_approves_and_the_run_gets_the_decision(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle, approval = _opened(run_worker)
    assert (approval.status, approval.details, approval.step_key) == ("open", "Refund 120 EUR", "refund")
    assert approval.assignees == {"users": [], "groups": ["managers"], "permissions": []}
    assert [found.id for found in approvals_for(ada)] == [approval.id]
    decision = decide_approval(approval.id, ada, approved=True, comment="ok, loyal customer")
    assert (decision["approved"], decision["by"], decision["comment"]) == (True, "ada", "ok, loyal customer")
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {
        "approved": True, "by": "ada", "comment": "ok, loyal customer", "at": decision["at"], "approvers": ["ada"]
    }  # fmt: skip
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by, approval.comment) == ("approved", "ada", "ok, loyal customer")
    wait = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="refund")
    assert wait.output["data"] == decision  # the journal records who, when and why
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.object_id, entry.change_message) == (
        ada.pk, str(handle.id), "Approved 'refund': ok, loyal customer (django-openworkflow)"
    )  # fmt: skip
    assert approvals_for(ada) == []


def test_someone_not_assigned_is_refused_and_nothing_is_delivered(run_worker, django_user_model):
    eve = _user(django_user_model, "eve", "interns")
    handle, approval = _opened(run_worker)
    assert approvals_for(eve) == []
    with pytest.raises(ApprovalNotAssigned, match="eve may not decide approval"):
        decide_approval(approval.id, eve, approved=True)
    approval.refresh_from_db()
    assert approval.status == "open" and not Signal.objects.exists() and not LogEntry.objects.exists()
    assert StepAttempt.objects.get(workflow_run_id=handle.id, step_name="refund").status == "running"


def test_users_permissions_and_superusers_may_decide(run_worker, django_user_model):
    bob = _user(django_user_model, "bob")
    holder = _user(django_user_model, "holder")
    holder.user_permissions.add(Permission.objects.get(codename="change_workflowrun"))
    root = django_user_model.objects.create_superuser("root", password="pw")
    _, approval = _opened(run_worker, {"assignees": ["user:bob", "perm:django_openworkflow.change_workflowrun"]})
    other = _user(django_user_model, "other")
    assert [len(approvals_for(user)) for user in (bob, holder, root, other)] == [1, 1, 1, 0]
    decide_approval(approval.id, holder, approved=False, comment="no")
    assert Approval.objects.get().status == "rejected"


def test_two_concurrent_decisions_deliver_one_and_the_second_is_told(run_worker, django_user_model):
    users = [_user(django_user_model, f"m{i}", "managers") for i in range(4)]
    handle, approval = _opened(run_worker)
    ids = iter(range(4))

    def decide() -> Any:
        user = users[next(ids)]  # next() on one iterator from four threads: the GIL hands each its own
        try:
            return decide_approval(approval.id, user, approved=True, comment=user.username)
        except ApprovalClosed as exc:
            return exc

    results = race(decide, n=4)
    won = [r for r in results if isinstance(r, dict)]
    told = [r for r in results if isinstance(r, ApprovalClosed)]
    assert len(won) == 1 and len(told) == 3
    winner = won[0]["by"]
    assert {exc.decided_by for exc in told} == {winner}
    assert all(f"already approved by {winner}" in str(exc) for exc in told)
    assert Signal.objects.count() == 1 and LogEntry.objects.count() == 1
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["by"] == winner == Approval.objects.get().decided_by


def test_a_timed_out_approval_returns_none_leaves_the_inbox_and_cannot_be_decided(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle = refund.run({"timeout": "1s"})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"timed_out": True}
    approval = Approval.objects.get()
    assert approval.status == "timed_out" and approvals_for(ada) == []
    with pytest.raises(ApprovalClosed, match="timed out"):
        decide_approval(approval.id, ada, approved=True)
    assert not Signal.objects.exists()


def test_an_approval_past_its_timeout_cannot_be_decided_before_a_worker_journals_the_timeout(
    run_worker, django_user_model
):
    ada = _user(django_user_model, "ada", "managers")
    handle, approval = _opened(run_worker)
    # Its time is up, and no worker has run since (workers down or behind): the approval is still open.
    Approval.objects.filter(id=approval.id).update(timeout_at=approval.created_at)
    with pytest.raises(ApprovalClosed, match="timed out"):
        decide_approval(approval.id, ada, approved=True)
    approval.refresh_from_db()
    assert approval.status == "open" and not Signal.objects.exists() and not LogEntry.objects.exists()


def test_a_user_assignee_is_a_username_never_a_primary_key(run_worker, django_user_model):
    bob = _user(django_user_model, "bob")
    numeric = _user(django_user_model, str(bob.pk))  # someone whose username is bob's id
    # "user:<bob's id>" names the user called that; were ids accepted too, two people would match it.
    _, approval = _opened(run_worker, {"assignees": [f"user:{bob.pk}"]})
    assert approvals_for(bob) == [] and [found.id for found in approvals_for(numeric)] == [approval.id]
    with pytest.raises(ApprovalNotAssigned):
        decide_approval(approval.id, bob, approved=True)


def test_a_run_with_an_approval_is_pruned_with_it(run_worker, django_user_model):
    from datetime import timedelta

    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.worker.prune import prune

    ada = _user(django_user_model, "ada", "managers")
    handle, approval = _opened(run_worker)
    decide_approval(approval.id, ada, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    WorkflowRun.objects.filter(id=handle.id).update(retention=timedelta(0))
    # The approval row points at the run and its wait: left behind, every database refuses the delete.
    assert prune().runs == {"refund": 1}
    assert not Approval.objects.exists() and not WorkflowRun.objects.filter(id=handle.id).exists()


@workflow(name="test-async-refund")
async def async_refund(ctx):
    scheduled = ctx.scheduled_at  # a query, kept off the event loop
    decision = await ctx.wait_for_approval("refund", assignees="group:managers", timeout="1h")
    return {"approved": decision.approved, "by": decision.by, "scheduled": scheduled}


def test_an_async_workflow_awaits_its_approval(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle = async_refund.run()
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    decide_approval(Approval.objects.get(workflow_run_id=handle.id).id, ada, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"approved": True, "by": "ada", "scheduled": None}


def test_a_finished_run_cannot_be_decided(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle, approval = _opened(run_worker)
    handle.cancel()
    assert approvals_for(ada) == []
    with pytest.raises(ApprovalClosed, match="its run is canceled"):
        decide_approval(approval.id, ada, approved=True)
    assert Approval.objects.get().status == "open" and not Signal.objects.exists()


def test_the_assignees_are_mailed_with_a_link_to_the_inbox(run_worker, django_user_model, settings, mailoutbox):
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "SITE_URL": "https://ops.example"}
    _user(django_user_model, "ada", "managers", email="ada@example.com")
    _user(django_user_model, "eve", "interns", email="eve@example.com")
    _user(django_user_model, "noaddress", "managers")
    _opened(run_worker)
    [sent] = mail.outbox
    assert sent.to == ["ada@example.com"] and sent.subject == "Approval needed: refund"
    assert "Refund 120 EUR" in sent.body and "https://ops.example/admin/django_openworkflow/approval/" in sent.body


def broken_hook(**kwargs: Any) -> None:
    raise RuntimeError("the chat server is down")


def test_a_failing_notification_is_logged_and_the_run_goes_on(run_worker, django_user_model, settings, caplog):
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "APPROVAL_NOTIFY": f"{__name__}.broken_hook"}
    ada = _user(django_user_model, "ada", "managers")
    with caplog.at_level(logging.ERROR, logger="django_openworkflow.alerts"):
        handle, approval = _opened(run_worker)
    assert "the approval notification" in caplog.text and "chat server is down" in caplog.text
    decide_approval(approval.id, ada, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["approved"] is True


@pytest.mark.parametrize(
    ("value", "message"),
    [("no.such.module.notify", "does not import"), ("django_openworkflow.alerts.APPROVAL_SETTING", "not a dotted")],
)
def test_a_bad_notify_setting_is_a_system_check_error(settings, value, message):
    settings.OPENWORKFLOW = {**settings.OPENWORKFLOW, "APPROVAL_NOTIFY": value}
    with pytest.raises(SystemCheckError, match=rf"openworkflow.E008.*APPROVAL_NOTIFY.*{message}"):
        call_command("check")


@pytest.mark.parametrize(
    ("assignees", "message"),
    [
        ([], "at least one assignee"),
        (["managers"], "is not 'user:"),
        (["perm:no_dot"], "app_label.codename"),
        (["group: "], "is not 'user:"),
    ],
)
def test_bad_assignees_are_named(assignees, message):
    with pytest.raises(StepUsageError, match=message):
        parse_assignees(assignees)


def test_a_real_worker_process_delivers_the_inbox_decision(workers, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    workers.start("--poll", "20ms", "--concurrency", "2")
    handle = refund.run({"amount": 5})
    wait_until(lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    decide_approval(Approval.objects.get().id, ada, approved=False, comment="too late")
    result = handle.result(timeout=CEILING)
    assert (result["approved"], result["by"], result["comment"]) == (False, "ada", "too late")


def test_sign_off_by_several_people_with_the_requester_excluded(run_worker, django_user_model):
    """Two distinct managers must approve; the one who asked may not, superuser or not; one rejection rejects."""
    import json

    from django.test import Client

    from django_openworkflow.models import ApiToken

    ada = django_user_model.objects.create_superuser("ada", password="pw")  # asked for the refund
    bob, cy = _user(django_user_model, "bob", "managers"), _user(django_user_model, "cy", "managers")
    handle, approval = _opened(run_worker, {"required": 2, "exclude": ["user:ada"]})
    assert (approval.required, approval.excluded) == (2, ["ada"])
    assert approvals_for(ada) == [] and [found.id for found in approvals_for(bob)] == [approval.id]
    _, token = ApiToken.objects.create_token(ada, "test")
    api = Client(headers={"Authorization": f"Bearer {token}"})
    url = f"/workflows/api/approvals/{approval.id}/decide"
    refused = api.post(url, json.dumps({"approved": True}), content_type="application/json")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_assigned")
    assert "excludes them from it (segregation of duties)" in refused.json()["error"]["message"]
    first = decide_approval(approval.id, bob, approved=True, comment="fine")
    assert (first["remaining"], first["approvers"]) == (1, ["bob"])
    assert not Signal.objects.exists() and approvals_for(bob) == []  # recorded, nothing delivered yet
    with pytest.raises(ApprovalNotAssigned, match="bob approved approval .* already: it needs 1 more"):
        decide_approval(approval.id, bob, approved=True)
    assert is_parked(handle)
    last = decide_approval(approval.id, cy, approved=True)
    assert (last["remaining"], last["approvers"]) == (0, ["bob", "cy"])
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["approvers"] == ["bob", "cy"] and handle.result()["by"] == "cy"
    assert [entry.change_message for entry in LogEntry.objects.order_by("id")] == [
        "Approved 'refund' (1 of 2): fine (django-openworkflow)", "Approved 'refund' (2 of 2) (django-openworkflow)"
    ]  # fmt: skip
    rejected, second = _opened(run_worker, {"required": 3})
    decide_approval(second.id, bob, approved=True)
    assert decide_approval(second.id, cy, approved=False, comment="no")["approvers"] == ["bob"]
    run_worker(until=lambda: rejected.status() == "completed")
    assert rejected.result()["approved"] is False and rejected.result()["approvers"] == ["bob"]
    with pytest.raises(ApprovalClosed, match="already rejected by cy"):
        decide_approval(second.id, ada, approved=True)


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        ({"required": 0}, "approvals_required must be a whole number from 1 to 100, got 0"),
        ({"required": True}, "approvals_required must be a whole number"),
        ({"exclude": ["group:managers"]}, "exclude 'group:managers' is not 'user:<username>'"),
    ],
)
def test_a_bad_approvals_required_or_exclude_fails_the_run_naming_it(run_worker, inp, message):
    handle = refund.run(inp)
    run_worker(until=lambda: handle.status() == "failed")
    assert message in handle.fetch().error["message"] and not Approval.objects.exists()
