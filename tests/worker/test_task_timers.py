"""Human tasks' time: due marks them overdue; remind_every re-notifies; escalate_after adds assignees and notifies.

The timers are stored with the task and fired by the workers' sweep, so they
fire after a worker restart (real worker processes), once each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group

from django_openworkflow import claim_task, decide_approval, submit_task
from django_openworkflow.client.approvals import approvals_for
from django_openworkflow.errors import WorkflowFailed
from django_openworkflow.models import Approval
from django_openworkflow.store import get_backend
from django_openworkflow.store.gauges import overdue_tasks_by_workflow
from django_openworkflow.testing import advance, fire_task_timers
from tests.admin.helpers import run_url
from tests.conftest import CEILING, is_parked, wait_until
from tests.fixtures.testapp.workflows import refund, refund_details

pytestmark = pytest.mark.django_db(transaction=True)

NOTE_FORM = "tests.fixtures.testapp.forms.NoteForm"


def _user(django_user_model: Any, name: str, *groups: str) -> Any:
    user = django_user_model.objects.create_user(name, email=f"{name}@example.com", password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def _opened(run_worker: Any, workflow: Any = refund_details, **inp: Any) -> tuple[Any, Approval]:
    handle = workflow.run({"form": NOTE_FORM, **inp} if workflow is refund_details else inp)
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_due_marks_a_task_overdue_first_in_the_list_and_in_the_gauge(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    _, later = _opened(run_worker, timeout="1d", due="5h")
    _, sooner = _opened(run_worker, refund, amount=3, timeout="1d", due="2h")
    _, undated = _opened(run_worker, timeout="1d")
    assert [found.id for found in approvals_for(ada)] == [sooner.id, later.id, undated.id]
    assert overdue_tasks_by_workflow(get_backend().now()) == {}
    advance("3h")
    assert overdue_tasks_by_workflow(get_backend().now()) == {"refund": 1}
    advance("3h")
    assert overdue_tasks_by_workflow(get_backend().now()) == {"refund": 1, "refund-details": 1}
    assert [found.id for found in approvals_for(ada)] == [sooner.id, later.id, undated.id]


def test_reminders_mail_the_assignees_then_only_the_holder(run_worker, django_user_model, mailoutbox, admin_client):
    ada, _bob = _user(django_user_model, "ada", "managers"), _user(django_user_model, "bob", "managers")
    handle, task = _opened(run_worker, timeout="1d", remind_every="1h")
    mailoutbox.clear()
    assert fire_task_timers() == []  # not due yet
    advance("61m")
    [fired] = fire_task_timers()
    assert (fired.reason, fired.notify["groups"]) == ("reminder", ["managers"])
    assert [sorted(mail.to) for mail in mailoutbox] == [["ada@example.com", "bob@example.com"]]
    assert mailoutbox[0].subject == "Reminder: input needed: details"
    assert fire_task_timers() == []  # once: the next one is an hour later
    claim_task(task.id, ada)
    advance("61m")
    [fired] = fire_task_timers()
    assert fired.notify == {"users": ["ada"]} and mailoutbox[1].to == ["ada@example.com"]
    task.refresh_from_db()
    assert [entry["action"] for entry in task.activity] == ["remind", "claim", "remind"]
    for _ in range(3):  # reminders in a row: one entry, counted, however long the task stays open
        advance("61m")
        [fired] = fire_task_timers()
    task.refresh_from_db()
    assert [entry["action"] for entry in task.activity] == ["remind", "claim", "remind"]
    last = task.activity[-1]
    assert last["count"] == 4 and last["last_at"] > last["at"] and len(mailoutbox) == 5
    page = admin_client.get(run_url(handle.id)).content.decode()
    assert "assignees reminded 4 times, the last at" in page and page.count("assignees reminded") == 2


def test_escalation_adds_the_managers_group_and_mails_it_once(run_worker, django_user_model, mailoutbox):
    _user(django_user_model, "sam", "support")
    grace = _user(django_user_model, "grace", "directors")
    handle, approval = _opened(
        run_worker,
        refund,
        amount=9,
        assignees=["group:support"],
        timeout="1d",
        escalate_after="4h",
        escalate_to="group:directors",
    )
    mailoutbox.clear()
    assert approvals_for(grace) == []
    advance("4h")
    [fired] = fire_task_timers()
    assert (fired.reason, fired.notify) == ("escalation", {"users": [], "groups": ["directors"], "permissions": []})
    assert [mail.to for mail in mailoutbox] == [["grace@example.com"]]
    assert mailoutbox[0].subject.startswith("Escalated to you: approval needed")
    assert fire_task_timers() == []
    approval.refresh_from_db()
    assert approval.assignees["groups"] == ["support", "directors"] and approval.escalated_at is not None
    decide_approval(approval.id, grace, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    assert [entry["action"] for entry in Approval.objects.get(id=approval.id).activity] == ["escalate", "approve"]


def test_a_decided_task_fires_no_timer(run_worker, django_user_model, mailoutbox):
    ada = _user(django_user_model, "ada", "managers")
    _, task = _opened(run_worker, timeout="1d", remind_every="1h", escalate_after="1h", escalate_to="group:directors")
    submit_task(task.id, ada, {"note": "done"})
    advance("2h")
    assert fire_task_timers() == []


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        ({"remind_every": "10s"}, "remind_every must be at least 0:01:00"),
        ({"remind_every": "soon"}, "remind_every is not a duration"),
        ({"escalate_after": "1h"}, "escalate_after and escalate_to go together"),
        ({"escalate_to": "group:directors"}, "escalate_after and escalate_to go together"),
        ({"escalate_after": "1h", "escalate_to": "directors"}, "is not 'user:<username>', 'group:<name>'"),
        ({"due": "2d"}, "approval 'refund' is due after it times out"),
    ],
)
def test_bad_timers_fail_the_run_naming_them(run_worker, inp, message):
    handle = refund.run({"amount": 1, **inp})
    run_worker(until=lambda: handle.status() == "failed")
    assert message in handle.fetch().error["message"]
    with pytest.raises(WorkflowFailed, match="StepUsageError"):
        handle.result()


@pytest.mark.database
def test_reminders_and_escalation_fire_after_a_worker_restart(workers, django_user_model, monkeypatch, tmp_path):
    notified = tmp_path / "notified.jsonl"
    monkeypatch.setenv("OWF_TEST_TASK_TIMERS_INTERVAL", "1s")
    monkeypatch.setenv("OWF_TEST_NOTIFY_FILE", str(notified))
    grace = _user(django_user_model, "grace", "directors")
    first = workers.start("--poll", "20ms")
    handle = refund_details.run(
        {
            "form": NOTE_FORM,
            "timeout": "1d",
            "remind_every": "1h",
            "escalate_after": "2h",
            "escalate_to": ["group:directors"],
        }
    )
    wait_until(lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists(), CEILING)
    task = Approval.objects.get(workflow_run_id=handle.id)
    first.kill()
    first.wait(30)
    advance("3h")  # both timers are due while no worker runs
    assert Approval.objects.get(id=task.id).activity == []
    workers.start("--poll", "20ms")
    wait_until(lambda: len(Approval.objects.get(id=task.id).activity) == 2, CEILING)
    task.refresh_from_db()
    assert sorted(entry["action"] for entry in task.activity) == ["escalate", "remind"]
    assert "directors" in task.assignees["groups"]
    wait_until(lambda: _lines(notified) >= 2, CEILING)
    calls = [json.loads(line) for line in notified.read_text().splitlines()]
    assert sorted(call["reason"] for call in calls if call["reason"]) == ["escalation", "reminder"]
    submit_task(task.id, grace, {"note": "escalated and done"})
    assert handle.result(timeout=CEILING)["by"] == "grace"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize(("value", "expected"), [("1m", 60.0), ("250ms", 0.25), (None, None), (0, None)])
def test_the_sweep_interval_setting(value, expected):
    from django.test import override_settings

    from django_openworkflow.conf import owf_settings
    from django_openworkflow.worker.maintenance import sweepers
    from django_openworkflow.worker.task_timers import TaskTimerSweeper

    with override_settings(OPENWORKFLOW={"TASK_TIMERS_INTERVAL": value}):
        interval = owf_settings.task_timers_interval
        assert (interval.total_seconds() if interval else None) == expected
        assert any(isinstance(sweeper, TaskTimerSweeper) for sweeper in sweepers()) is (expected is not None)


def test_a_bad_sweep_interval_fails_the_system_checks():
    from django.test import override_settings

    from django_openworkflow.checks import check_settings

    with override_settings(OPENWORKFLOW={"TASK_TIMERS_INTERVAL": "often"}):
        errors = [m for m in check_settings() if m.id == "openworkflow.E040"]
    assert len(errors) == 1 and "TASK_TIMERS_INTERVAL" in errors[0].msg


def test_the_task_of_a_canceled_run_fires_no_timer_and_cannot_be_claimed(run_worker, django_user_model):
    from django_openworkflow import claim_task
    from django_openworkflow.errors import ApprovalClosed

    ada = _user(django_user_model, "ada", "managers")
    handle, task = _opened(run_worker, timeout="1d", remind_every="1h")
    advance("2h")  # the reminder is due, then the run is canceled
    handle.cancel()
    run_worker(until=lambda: handle.status() == "canceled")
    assert fire_task_timers() == []
    with pytest.raises(ApprovalClosed, match="cannot be claimed: its run is canceled"):
        claim_task(task.id, ada)
