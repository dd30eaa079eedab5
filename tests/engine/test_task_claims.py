"""Who works on a human task: claim, release, reassign; the claim binds every front door; the activity and admin log."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, Permission
from django.test import override_settings

from django_openworkflow import claim_task, decide_approval, reassign_task, release_task, submit_task
from django_openworkflow.client.approvals import approvals_for, inbox_counts
from django_openworkflow.errors import ApprovalNotAssigned, InvalidArgument, TaskClaimed, WrongTaskKind
from django_openworkflow.models import Approval, Signal
from tests.conftest import CEILING, is_parked, race, wait_until
from tests.fixtures.testapp.workflows import refund, refund_details

pytestmark = pytest.mark.django_db(transaction=True)

NOTE_FORM = "tests.fixtures.testapp.forms.NoteForm"


def _user(django_user_model: Any, name: str, *groups: str, reassigns: bool = False) -> Any:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    if reassigns:
        user.user_permissions.add(Permission.objects.get(codename="reassign_approval"))
        user = django_user_model.objects.get(pk=user.pk)  # a fresh object: no permission cache
    return user


def _opened(run_worker: Any, workflow: Any = refund_details, **inp: Any) -> tuple[Any, Approval]:
    handle = workflow.run({"form": NOTE_FORM, **inp} if workflow is refund_details else inp)
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def _actions(task: Approval) -> list[tuple[str, str]]:
    task.refresh_from_db()
    return [(entry["action"], entry["by"]) for entry in task.activity]


def _logged() -> list[str]:
    return [entry.change_message for entry in LogEntry.objects.order_by("id")]


def test_a_claimed_task_refuses_another_members_submission_naming_who_holds_it(run_worker, django_user_model):
    ada, bob = _user(django_user_model, "ada", "managers"), _user(django_user_model, "bob", "managers")
    handle, task = _opened(run_worker)
    claimed = claim_task(task.id, ada)
    assert (claimed.claimed_by, claimed.claimed_at is not None) == ("ada", True)
    with pytest.raises(TaskClaimed, match="task .* is claimed by ada: only they may submit it") as refused:
        submit_task(task.id, bob, {"note": "mine"})
    assert refused.value.claimed_by == "ada"
    with pytest.raises(TaskClaimed, match="claimed by ada"):
        claim_task(task.id, bob)
    with pytest.raises(TaskClaimed, match="claimed by ada: only they may release it"):
        release_task(task.id, bob)
    assert not Signal.objects.exists()
    # Bob still sees it, as taken by ada; it is not among his groups' tasks waiting for someone.
    [seen] = approvals_for(bob)
    assert seen.claimed_by == "ada"
    assert approvals_for(bob, scope="groups") == [] and approvals_for(bob, scope="mine") == []
    assert [found.id for found in approvals_for(ada, scope="mine")] == [task.id]
    assert inbox_counts(ada) == {"all": 1, "mine": 1, "groups": 0, "overdue": 0}
    assert claim_task(task.id, ada).activity == claimed.activity  # claiming it again changes nothing
    submit_task(task.id, ada, {"note": "done"})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["by"] == "ada"
    assert _actions(task) == [("claim", "ada"), ("submit", "ada")]
    assert _logged() == ["Claimed 'details' (django-openworkflow)", "Submitted 'details' (django-openworkflow)"]


def test_a_claimed_approval_refuses_another_members_decision(run_worker, django_user_model):
    ada, bob = _user(django_user_model, "ada", "managers"), _user(django_user_model, "bob", "managers")
    root = django_user_model.objects.create_superuser("root", password="pw")
    handle, approval = _opened(run_worker, refund, amount=5)
    claim_task(approval.id, bob)
    for other in (ada, root):  # a superuser too: the holder is the one who decides, until released
        with pytest.raises(TaskClaimed, match="approval .* is claimed by bob: only they may decide it"):
            decide_approval(approval.id, other, approved=True)
    release_task(approval.id, root)  # a superuser may release what another holds
    decide_approval(approval.id, ada, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    assert _actions(approval) == [("claim", "bob"), ("release", "root"), ("approve", "ada")]
    approval.refresh_from_db()
    assert approval.activity[1]["from"] == "bob"


def test_release_lets_another_member_claim_and_submit(run_worker, django_user_model):
    ada, bob = _user(django_user_model, "ada", "managers"), _user(django_user_model, "bob", "managers")
    handle, task = _opened(run_worker)
    claim_task(task.id, ada)
    released = release_task(task.id, ada)
    assert released.claimed_by == "" and released.claimed_at is None
    assert release_task(task.id, ada).activity == released.activity  # nobody holds it: nothing to release
    assert [found.id for found in approvals_for(bob, scope="groups")] == [task.id]
    claim_task(task.id, bob)
    submit_task(task.id, bob, {"note": "bob's"})
    run_worker(until=lambda: handle.status() == "completed")
    assert _actions(task) == [("claim", "ada"), ("release", "ada"), ("claim", "bob"), ("submit", "bob")]
    assert _logged() == [
        "Claimed 'details' (django-openworkflow)",
        "Released 'details' (held by ada) (django-openworkflow)",
        "Claimed 'details' (django-openworkflow)",
        "Submitted 'details' (django-openworkflow)",
    ]


def test_reassign_needs_the_permission_and_gives_the_task_to_someone_not_assigned(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    lead = _user(django_user_model, "lead", reassigns=True)  # not an assignee: the permission is enough
    dave = _user(django_user_model, "dave")
    handle, task = _opened(run_worker)
    claim_task(task.id, ada)
    with pytest.raises(ApprovalNotAssigned, match="it takes the django_openworkflow.reassign_approval permission"):
        reassign_task(task.id, ada, "dave")
    with pytest.raises(InvalidArgument, match="no active user has that username"):
        reassign_task(task.id, lead, "nobody")
    assert approvals_for(dave) == []
    after = reassign_task(task.id, lead, "dave")
    assert (after.claimed_by, after.assignees["users"]) == ("dave", ["dave"])
    with pytest.raises(TaskClaimed, match="claimed by dave"):
        submit_task(task.id, ada, {"note": "too late"})
    assert [found.id for found in approvals_for(dave, scope="mine")] == [task.id]
    submit_task(task.id, dave, {"note": "dave's"})
    run_worker(until=lambda: handle.status() == "completed")
    assert _actions(task) == [("claim", "ada"), ("reassign", "lead"), ("submit", "dave")]
    task.refresh_from_db()
    assert (task.activity[1]["from"], task.activity[1]["to"]) == ("ada", "dave")
    assert _logged()[1] == "Reassigned 'details' to dave (held by ada) (django-openworkflow)"


def test_an_unassigned_user_sees_nothing_and_may_not_claim(run_worker, django_user_model):
    eve = _user(django_user_model, "eve", "support")
    _, task = _opened(run_worker)
    assert inbox_counts(eve) == {"all": 0, "mine": 0, "groups": 0, "overdue": 0}
    with pytest.raises(ApprovalNotAssigned, match="eve may not decide task"):
        claim_task(task.id, eve)
    with pytest.raises(ApprovalNotAssigned):
        release_task(task.id, eve)
    assert _actions(task) == [] and not LogEntry.objects.exists()


def test_an_approval_that_needs_several_approvals_cannot_be_claimed(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    _, approval = _opened(run_worker, refund, amount=5, required=2)
    with pytest.raises(WrongTaskKind, match="needs 2 approvals from different people: it cannot be claimed"):
        claim_task(approval.id, ada)
    decide_approval(approval.id, ada, approved=True)
    assert _actions(approval) == [("sign-off", "ada")]


def test_of_many_members_claiming_at_once_one_holds_the_task(run_worker, django_user_model):
    members = [_user(django_user_model, f"m{n}", "managers") for n in range(6)]
    _, task = _opened(run_worker)
    turn = iter(members)  # guarded by lock: each thread takes its own member
    lock = threading.Lock()

    def claim() -> str:
        with lock:
            user = next(turn)
        try:
            return claim_task(task.id, user).claimed_by
        except TaskClaimed as exc:
            return f"refused:{exc.claimed_by}"

    results = race(claim, n=len(members))
    winners = [result for result in results if not result.startswith("refused:")]
    assert len(winners) == 1
    assert all(result == f"refused:{winners[0]}" for result in results if result.startswith("refused:"))
    assert _actions(task) == [("claim", winners[0])]


def test_a_real_worker_process_delivers_the_holders_submission_only(workers, django_user_model):
    ada, bob = _user(django_user_model, "ada", "managers"), _user(django_user_model, "bob", "managers")
    workers.start("--poll", "20ms", "--concurrency", "2")
    handle = refund_details.run({"form": NOTE_FORM})
    wait_until(lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    task = Approval.objects.get(workflow_run_id=handle.id)
    claim_task(task.id, bob)
    with pytest.raises(TaskClaimed, match="claimed by bob"):
        submit_task(task.id, ada, {"note": "ada's"})
    submit_task(task.id, bob, {"note": "bob's"})
    assert handle.result(timeout=CEILING)["data"] == {"note": "bob's"}
    assert _actions(task) == [("claim", "bob"), ("submit", "bob")]


def test_the_reassign_permission_is_the_one_the_setting_names(run_worker, django_user_model):
    """TASK_REASSIGN_PERMISSION: holders of the project's own permission reassign; the package's no longer does."""
    ada = _user(django_user_model, "ada", "managers")
    packaged = _user(django_user_model, "lead", reassigns=True)  # django_openworkflow.reassign_approval
    own = _user(django_user_model, "boss")
    own.user_permissions.add(Permission.objects.get(codename="change_group"))
    own = django_user_model.objects.get(pk=own.pk)  # its permissions read afresh
    _, task = _opened(run_worker)
    claim_task(task.id, ada)
    with override_settings(OPENWORKFLOW={"TASK_REASSIGN_PERMISSION": "auth.change_group"}):
        with pytest.raises(ApprovalNotAssigned, match="it takes the auth.change_group permission"):
            reassign_task(task.id, packaged, "boss")
        assert release_task(task.id, own).claimed_by == ""  # the holder was ada: boss may release it
        assert reassign_task(task.id, own, "ada").claimed_by == "ada"


@pytest.mark.parametrize("value", ["reassign_approval", "a.b.c", "", None, 7, " auth.change_group"])
def test_a_reassign_permission_not_named_app_label_dot_codename_fails_the_checks(value):
    from django_openworkflow.checks import check_settings

    with override_settings(OPENWORKFLOW={"TASK_REASSIGN_PERMISSION": value}):
        errors = [message for message in check_settings() if message.id == "openworkflow.E009"]
    assert len(errors) == 1 and "TASK_REASSIGN_PERMISSION" in errors[0].msg
