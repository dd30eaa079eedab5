"""The ModelAdmin's permissions (admin/options.py): who sees runs, who may act on them, start them, signal them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from django_openworkflow.models import Signal, WorkflowRun
from tests.admin.helpers import ADD_URL, LIST_URL, action_url, make_run, run_url, signal_url


@pytest.mark.django_db
def test_anonymous_users_are_sent_to_the_login_page(client: Any) -> None:
    run = make_run()
    for response in (
        client.get(LIST_URL),
        client.get(run_url(run)),
        client.get(ADD_URL),
        client.post(action_url(run, "cancel")),
        client.post(LIST_URL, {"action": "cancel_runs", "_selected_action": [str(run.id)], "post": "yes"}),
    ):
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    run.refresh_from_db()
    assert run.status == "pending"


@pytest.mark.django_db
def test_staff_without_permissions_is_forbidden(staff_client: Any) -> None:
    client = staff_client()
    run = make_run()
    assert client.get(LIST_URL).status_code == 403
    assert client.get(run_url(run)).status_code == 403
    assert client.get(ADD_URL).status_code == 403
    for action in ("cancel", "retry_now", "retry_failed", "rerun"):
        assert client.post(action_url(run, action)).status_code == 403
    run.refresh_from_db()
    assert run.status == "pending" and WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_view_permission_shows_runs_but_offers_no_action(staff_client: Any) -> None:
    client = staff_client("view")
    run = make_run()
    listing = client.get(LIST_URL)
    assert listing.status_code == 200
    assert "cancel_runs" not in listing.content.decode() and "Start a run" not in listing.content.decode()
    page = client.get(run_url(run))
    assert page.status_code == 200 and "/action/" not in page.content.decode()
    assert client.post(action_url(run, "cancel")).status_code == 403
    client.post(
        LIST_URL, {"action": "cancel_runs", "_selected_action": [str(run.id)], "select_across": "0", "post": "yes"}
    )
    run.refresh_from_db()
    assert run.status == "pending"


@pytest.mark.django_db
def test_change_permission_allows_cancel_and_retry_but_not_rerun(staff_client: Any) -> None:
    client = staff_client("view", "change")
    run = make_run()
    page = client.get(run_url(run)).content.decode()
    assert action_url(run, "cancel") in page and action_url(run, "rerun") not in page
    assert client.post(action_url(run, "rerun")).status_code == 403
    assert client.get(ADD_URL).status_code == 403
    assert client.post(action_url(run, "cancel")).status_code == 302
    run.refresh_from_db()
    assert run.status == "canceled"
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_add_permission_allows_rerun_and_start_but_not_cancel(staff_client: Any) -> None:
    client = staff_client("view", "add")
    run = make_run()
    assert client.post(action_url(run, "cancel")).status_code == 403
    assert client.post(action_url(run, "rerun")).status_code == 302
    assert client.get(ADD_URL).status_code == 200
    assert WorkflowRun.objects.count() == 2
    run.refresh_from_db()
    assert run.status == "pending"


@pytest.mark.django_db
def test_send_signal_needs_post_a_known_run_and_the_change_permission(staff_client: Any) -> None:
    run = make_run()
    client = staff_client("view")
    assert signal_url(run) not in client.get(run_url(run)).content.decode()
    assert client.post(signal_url(run), {"name": "approval", "json_data": "1"}).status_code == 403
    assert client.get(signal_url(run)).status_code == 405
    assert not Signal.objects.exists()


@pytest.mark.django_db
def test_send_signal_with_change_permission(staff_client: Any) -> None:
    run = make_run()
    client = staff_client("view", "change")
    assert signal_url(run) in client.get(run_url(run)).content.decode()
    assert client.post(signal_url(run), {"name": "approval", "json_data": "1"}).status_code == 302
    assert Signal.objects.get().data == 1
    assert client.post(signal_url(uuid.uuid4()), {"name": "approval"}).status_code == 404
