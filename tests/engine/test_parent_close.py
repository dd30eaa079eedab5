"""The parent-close policy: what a parent's end (completion, failure, cancel) does to its unfinished children."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_openworkflow import WorkflowRegistrationError, send_signal, workflow
from django_openworkflow.client.listing import run_json
from django_openworkflow.conf import owf_settings
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.testing import drain
from tests.admin.helpers import run_url
from tests.conftest import CEILING, wait_until
from tests.fixtures.close_workflows import (
    close_bad_policy,
    close_continues,
    close_deadline,
    close_fan_out,
    close_grandparent,
    close_many,
    close_retried,
    close_three_policies,
)
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

OPEN = ("pending", "running")


def children_of(run_id) -> WorkflowRun:
    return WorkflowRun.objects.filter(parent_step_attempt__workflow_run_id=run_id)


def child(run_id, name: str) -> WorkflowRun:
    return children_of(run_id).get(parent_step_attempt__step_name=name)


def waiting(run: WorkflowRun) -> bool:
    """Parked in its wait for "go" (its "work" step done)."""
    return StepAttempt.objects.filter(workflow_run_id=run.id, kind="signal", status="running").exists()


def undone(run_id) -> list[str]:
    return list(SideEffect.objects.filter(run_id=run_id, step="undo").values_list("step", flat=True))


def test_a_parent_canceled_mid_fan_out_of_300_terminate_children_leaves_none_running(workers):
    parent = close_fan_out.run({"n": 300, "policy": "terminate", "finished": 10})
    workers.start("--poll", "20ms", "--concurrency", "4")
    workers.start("--poll", "20ms", "--concurrency", "4")
    # Canceled while it still starts children (a batch of 50 at a time), some of them waiting or done.
    # Its "pace" step (before the last batch) holds it 2 s once 10 children completed: the cancel lands then.
    wait_until(
        lambda: (
            children_of(parent.id).count() >= 250 and children_of(parent.id).filter(status="completed").count() >= 10
        ),
        timeout=CEILING,
    )
    parent.cancel()
    started = children_of(parent.id).count()
    assert 250 <= started < 300, "the cancel did not land mid-fan-out: the test no longer tests what it says"
    finished_before = set(children_of(parent.id).filter(status="completed").values_list("id", flat=True))
    # The cancel's own transaction ended them: no worker needed to see it.
    assert not children_of(parent.id).filter(status__in=OPEN).exists()
    assert parent.status() == "canceled"
    # The workers go on: nothing starts more children, nothing ends differently.
    wait_until(lambda: not WorkflowRun.objects.filter(workflow_name="close-child", status__in=OPEN).exists())
    runs = children_of(parent.id)
    assert runs.count() == started
    by_status = {status: set(runs.filter(status=status).values_list("id", flat=True)) for status in ("completed",)}
    assert by_status["completed"] == finished_before  # finished children untouched
    canceled = runs.filter(status="canceled")
    assert canceled.count() == started - len(finished_before)
    assert all(run.error["message"].startswith("canceled because its parent run ended") for run in canceled)
    assert not StepAttempt.objects.filter(workflow_run__in=canceled, status="running").exists()
    assert not SideEffect.objects.filter(step="undo").exists()  # terminate runs no compensation


@pytest.mark.parametrize("end", ["fail", "complete", "cancel"])
def test_each_policy_when_the_parent_ends(workers, end):
    parent = close_three_policies.run()
    workers.start("--poll", "20ms")
    wait_until(lambda: children_of(parent.id).count() == 3 and all(waiting(run) for run in children_of(parent.id)))
    if end == "cancel":
        parent.cancel()
    else:
        send_signal(parent.id, "end", end)
    wait_until(lambda: child(parent.id, "child-request_cancel").status == "canceled")
    assert parent.status() == {"fail": "failed", "complete": "completed", "cancel": "canceled"}[end]
    terminated, asked, abandoned = (child(parent.id, f"child-{p}") for p in ("None", "request_cancel", "abandon"))
    assert terminated.status == "canceled" and undone(terminated.id) == []  # the workflow's default: terminate
    assert terminated.parent_close_policy == "terminate"
    assert undone(asked.id) == ["undo"]  # its compensations ran before it ended
    assert abandoned.status == "running" and waiting(abandoned)  # left alone
    send_signal(abandoned.id, "go")
    wait_until(lambda: child(parent.id, "child-abandon").status == "completed")


def test_a_retried_attempt_closes_no_child_only_the_final_failure_does():
    parent = close_retried.run()
    drain(skip_sleeps=False)
    run = WorkflowRun.objects.get(id=parent.id)
    assert run.status == "running" and run.attempts == 1  # backing off before its second attempt
    assert children_of(parent.id).get().status == "running"
    get_backend().wake_runs([parent.id])  # its backoff skipped (drain leaves a run with an open child step alone)
    drain()  # the second attempt fails too: for good
    assert parent.status() == "failed"
    assert children_of(parent.id).get().status == "canceled"


def test_grandchildren_are_closed_through_each_childs_end():
    parent = close_grandparent.run()
    drain()
    middle = children_of(parent.id).get()
    grandchild = children_of(middle.id).get()
    assert grandchild.status == "running"
    parent.cancel()
    assert WorkflowRun.objects.get(id=middle.id).status == "canceled"
    assert WorkflowRun.objects.get(id=grandchild.id).status == "canceled"


def test_continue_as_new_keeps_the_children_until_the_last_run_ends():
    first = close_continues.run()
    drain()
    kid = children_of(first.id).get()
    successor = WorkflowRun.objects.get(continued_from_id=first.id)
    assert WorkflowRun.objects.get(id=kid.id).status == "running"  # the handover closed nothing
    assert WorkflowRun.objects.get(id=kid.id).closes_with == successor.id
    send_signal(successor.id, "end", "ok")
    drain()
    assert WorkflowRun.objects.get(id=successor.id).status == "completed"
    assert WorkflowRun.objects.get(id=kid.id).status == "canceled"


def test_a_child_can_inherit_its_parents_deadline():
    parent = close_deadline.run(deadline_at="1h")
    drain()
    deadline = WorkflowRun.objects.get(id=parent.id).deadline_at
    assert child(parent.id, "inherits").deadline_at == deadline
    assert child(parent.id, "own").deadline_at is None


def test_abandon_is_the_default_and_a_completed_parent_leaves_abandoned_children_alone():
    assert close_deadline.parent_close_policy == "abandon"
    parent = close_deadline.run()
    drain()
    send_signal(parent.id, "end", "ok")
    drain()
    assert parent.status() == "completed"
    assert sorted(children_of(parent.id).values_list("status", "parent_close_policy", "closes_with")) == [
        ("running", "abandon", None),
        ("running", "abandon", None),
    ]


def test_a_bad_policy_is_refused_naming_the_allowed_values():
    with pytest.raises(WorkflowRegistrationError, match="must be one of 'abandon', 'terminate', 'request_cancel'"):
        workflow(name="close-bad-default", parent_close_policy="kill")(lambda ctx: None)
    run = close_bad_policy.run()
    drain()
    error = WorkflowRun.objects.get(id=run.id).error
    assert error["type"] == "ValueError"
    assert "parent_close_policy must be one of 'abandon', 'terminate', 'request_cancel', got 'kill'" in error["message"]
    assert not children_of(run.id).exists()


def test_a_childs_run_page_and_json_show_its_policy(admin_client):
    parent = close_three_policies.run()
    drain()
    kid = child(parent.id, "child-request_cancel")
    page = admin_client.get(run_url(kid)).content.decode()
    assert "when the parent ends: Request cancel" in page
    assert run_json(kid)["parent_close_policy"] == "request_cancel"
    assert run_json(WorkflowRun.objects.get(id=parent.id))["parent_close_policy"] is None


def test_a_parent_failed_by_its_deadline_closes_its_children():
    parent = close_three_policies.run(deadline_at="1h")
    drain()
    # Its deadline passes while it waits: the claim that wakes it fails it (the overdue path, no replay).
    past = timezone.now() - timedelta(seconds=1)
    WorkflowRun.objects.filter(id=parent.id).update(deadline_at=past, available_at=past)
    drain()
    assert WorkflowRun.objects.get(id=parent.id).error["type"] == "DeadlineExceeded"
    assert child(parent.id, "child-None").status == "canceled"
    assert child(parent.id, "child-request_cancel").status == "canceled"
    assert undone(child(parent.id, "child-request_cancel").id) == ["undo"]
    assert child(parent.id, "child-abandon").status == "running"


def test_closing_300_children_costs_the_statements_closing_3_does():
    def cancel_cost(n: int) -> int:
        parent = close_many.run({"n": n})
        drain(until=lambda: children_of(parent.id).count() == n)  # the parent's slice: the starts, the park
        with CaptureQueriesContext(connections[owf_settings.database]) as queries:
            parent.cancel()
        assert children_of(parent.id).filter(status="canceled").count() == n
        return len(queries)

    assert cancel_cost(300) == cancel_cost(3)
