"""Cancel, retry now, retry from the failed step, re-run (admin/actions.py): from the run page and the list."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_openworkflow.conf import owf_settings
from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.admin.helpers import (
    LIST_URL,
    action_url,
    make_run,
    messages_of,
    one_of_each,
    parked_in_a_sleep,
    run_url,
    waiting_for_signal,
)

# -- actions on the run page -----------------------------------------------------------------------


@pytest.mark.django_db
def test_cancel_from_the_run_page(admin_client: Any) -> None:
    run = make_run()
    page = admin_client.get(run_url(run)).content.decode()
    assert action_url(run, "cancel") in page and "csrfmiddlewaretoken" in page
    response = admin_client.post(action_url(run, "cancel"), follow=True)
    assert response.redirect_chain[-1][0] == run_url(run)
    run.refresh_from_db()
    assert run.status == "canceled"
    assert "Canceled: 1 run." in messages_of(response)
    # The page no longer offers it; posting again is refused politely.
    assert action_url(run, "cancel") not in response.content.decode()
    again = admin_client.post(action_url(run, "cancel"), follow=True)
    assert again.status_code == 200
    assert any("skipped 1 run" in m and "already finished" in m for m in messages_of(again))


@pytest.mark.django_db
def test_retry_now_makes_a_parked_run_due(admin_client: Any) -> None:
    run = parked_in_a_sleep()
    response = admin_client.post(action_url(run, "retry_now"), follow=True)
    run.refresh_from_db()
    assert run.available_at <= timezone.now()
    assert "Made due now: 1 run." in messages_of(response)
    assert StepAttempt.objects.get(workflow_run=run).context["woken_early"] is True


@pytest.mark.django_db
def test_retry_now_refuses_a_finished_run(admin_client: Any) -> None:
    run = one_of_each()["completed"]
    response = admin_client.post(action_url(run, "retry_now"), follow=True)
    assert response.status_code == 200
    assert any("it has finished (completed)" in m for m in messages_of(response))
    run.refresh_from_db()
    assert run.status == "completed"


@pytest.mark.django_db
def test_retry_from_failed_step(admin_client: Any) -> None:
    runs = one_of_each()
    response = admin_client.post(action_url(runs["failed"], "retry_failed"), follow=True)
    runs["failed"].refresh_from_db()
    assert runs["failed"].status == "pending" and runs["failed"].error is None
    assert "Sent back to pending: 1 run." in messages_of(response)
    refused = admin_client.post(action_url(runs["completed"], "retry_failed"), follow=True)
    assert any("it has not failed" in m for m in messages_of(refused))


@pytest.mark.django_db
def test_rerun_starts_a_new_run_with_the_same_input_and_version(admin_client: Any) -> None:
    old = make_run(workflow_name="versioned", version="v1", status="completed", input={"x": [1, 2]})
    response = admin_client.post(action_url(old, "rerun"))
    new = WorkflowRun.objects.exclude(id=old.id).get()
    assert response.status_code == 302 and response["Location"] == run_url(new)
    assert (new.workflow_name, new.version, new.input, new.status) == ("versioned", "v1", {"x": [1, 2]}, "pending")


@pytest.mark.django_db
def test_rerun_of_a_workflow_no_longer_registered_is_refused(admin_client: Any) -> None:
    old = make_run(workflow_name="gone", version="v9", status="failed")
    response = admin_client.post(action_url(old, "rerun"), follow=True)
    assert response.status_code == 200
    assert any("no workflow 'gone'" in m for m in messages_of(response))
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_action_endpoint_needs_post_and_a_known_action(admin_client: Any) -> None:
    run = make_run()
    assert admin_client.get(action_url(run, "cancel")).status_code == 405
    assert admin_client.post(action_url(run, "explode")).status_code == 404
    unknown_run = reverse("admin:django_openworkflow_workflowrun_action", args=[uuid.uuid4(), "cancel"])
    assert admin_client.post(unknown_run).status_code == 404
    run.refresh_from_db()
    assert run.status == "pending"


# -- list actions ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_list_action_asks_for_confirmation_then_reports(admin_client: Any) -> None:
    runs = one_of_each()
    chosen = [runs["pending"], runs["parked"], runs["completed"]]
    data = {
        "action": "cancel_runs",
        "_selected_action": [str(r.id) for r in chosen],
        "index": "0",
        "select_across": "0",
    }
    confirm = admin_client.post(LIST_URL, data)
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "Cancel the 3 selected runs?" in html
    assert "will be skipped" in html and 'name="post" value="yes"' in html
    assert WorkflowRun.objects.filter(status="canceled").count() == 1  # nothing changed yet

    done = admin_client.post(
        LIST_URL,
        {"action": "cancel_runs", "_selected_action": [str(r.id) for r in chosen], "select_across": "0", "post": "yes"},
        follow=True,
    )
    assert done.status_code == 200
    statuses = {r.id: r.status for r in WorkflowRun.objects.filter(id__in=[r.id for r in chosen])}
    assert statuses == {
        runs["pending"].id: "canceled",
        runs["parked"].id: "canceled",
        runs["completed"].id: "completed",
    }
    found = messages_of(done)
    assert "Canceled: 2 runs." in found
    assert any("skipped 1 run" in m and str(runs["completed"].id)[:8] in m for m in found)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "eligible"),
    [
        ("cancel", {"status": "pending"}),
        ("retry_now", {"status": "pending", "available_at": timezone.now() + timedelta(hours=1)}),
        ("retry_failed", {"status": "failed"}),
        ("rerun", {"status": "completed"}),
    ],
)
def test_a_list_action_on_many_runs_costs_what_it_costs_on_few(
    admin_client: Any, action: str, eligible: dict[str, Any]
) -> None:
    def queries_to_apply_to(count: int) -> int:
        WorkflowRun.objects.all().delete()
        runs = [make_run(**eligible) for _ in range(count)] + [make_run(status="canceled")]  # one is refused
        form = {"action": f"{action}_runs", "_selected_action": [str(r.id) for r in runs], "post": "yes"}
        with CaptureQueriesContext(connections[owf_settings.database]) as captured:
            response = admin_client.post(LIST_URL, form, follow=True)
        assert any(f" {count} run" in m or f" {count + 1} run" in m for m in messages_of(response))
        return len(captured)

    queries_to_apply_to(1)  # caches warmed: content types, the session
    assert queries_to_apply_to(25) == queries_to_apply_to(2)


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["cancel", "retry_now", "retry_failed", "rerun"])
def test_a_confirmation_page_costs_the_same_for_many_runs(admin_client: Any, action: str) -> None:
    def queries_to_confirm(count: int) -> int:
        WorkflowRun.objects.all().delete()
        runs = [make_run(status="failed", error={"type": "ValueError", "message": "x"}) for _ in range(count)]
        form = {"action": f"{action}_runs", "_selected_action": [str(r.id) for r in runs]}
        with CaptureQueriesContext(connections[owf_settings.database]) as captured:
            response = admin_client.post(LIST_URL, form)
        assert response.status_code == 200 and b"are you sure?" in response.content
        return len(captured)

    queries_to_confirm(1)  # caches warmed
    assert queries_to_confirm(20) == queries_to_confirm(2)


@pytest.mark.django_db
def test_list_action_on_every_run_matching_the_filter(admin_client: Any) -> None:
    runs = one_of_each()
    others = [make_run(workflow_name="sleeper") for _ in range(3)]
    done = admin_client.post(
        LIST_URL + "?workflow=sleeper",
        {"action": "cancel_runs", "_selected_action": [str(others[0].id)], "select_across": "1", "post": "yes"},
        follow=True,
    )
    assert "Canceled: 4 runs." in messages_of(done)
    assert WorkflowRun.objects.filter(workflow_name="sleeper", status="canceled").count() == 4
    runs["pending"].refresh_from_db()
    assert runs["pending"].status == "pending"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("action", "status", "expected"),
    [
        ("retry_now", "parked", "Made due now: 1 run."),
        ("retry_failed", "failed", "Sent back to pending: 1 run."),
        ("rerun", "completed", "Started a new run for 1 run"),
    ],
)
def test_each_list_action(admin_client: Any, action: str, status: str, expected: str) -> None:
    run = one_of_each()[status]
    done = admin_client.post(
        LIST_URL,
        {"action": f"{action}_runs", "_selected_action": [str(run.id)], "select_across": "0", "post": "yes"},
        follow=True,
    )
    assert any(m.startswith(expected) for m in messages_of(done)), messages_of(done)


# -- actions that would do nothing refuse, saying why ----------------------------------------------


@pytest.mark.django_db
def test_retry_now_refuses_a_run_waiting_for_a_signal(admin_client: Any) -> None:
    run, _ = waiting_for_signal("approval", available_at=timezone.now() + timedelta(hours=1))
    response = admin_client.post(action_url(run, "retry_now"), follow=True)
    assert messages_of(response) == [
        f"Retry now: skipped 1 run ({str(run.id)[:8]}): it waits for signal 'approval', "
        "which retry now cannot deliver (send the signal instead)."
    ]
    assert WorkflowRun.objects.get(id=run.id).available_at == run.available_at
    # The list action says the same.
    listed = admin_client.post(
        LIST_URL, {"action": "retry_now_runs", "_selected_action": [str(run.id)], "post": "yes"}, follow=True
    )
    assert any("it waits for signal 'approval'" in m for m in messages_of(listed)), messages_of(listed)


@pytest.mark.django_db
def test_retry_from_failed_step_refuses_a_run_failed_by_the_step_limit(admin_client: Any) -> None:
    run = make_run(status="failed", error={"type": "StepLimitExceeded", "message": "reached 1000 step attempts"})
    response = admin_client.post(action_url(run, "retry_failed"), follow=True)
    (message,) = messages_of(response)
    assert "skipped 1 run" in message and "OPENWORKFLOW['MAX_STEP_ATTEMPTS']" in message
    assert "would reach the limit again at once (re-run it with the same input, or raise the limit)" in message
    assert WorkflowRun.objects.get(id=run.id).status == "failed"
