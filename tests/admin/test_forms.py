"""The admin's forms (admin/forms.py): start a run, send a signal to a run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow.admin.forms import SendSignalForm, StartRunForm
from django_openworkflow.models import Signal, WorkflowRun
from tests.admin.helpers import ADD_URL, make_run, messages_of, run_url, signal_url, waiting_for_signal, workflow_choice

# -- starting a run --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_start_form_lists_registered_workflows(admin_client: Any) -> None:
    response = admin_client.get(ADD_URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "versioned (v1)" in html and "versioned (v2)" in html and "three-steps" in html
    assert 'type="datetime-local"' in html


@pytest.mark.django_db
def test_start_form_starts_a_run_and_redirects_to_it(admin_client: Any) -> None:
    response = admin_client.post(
        ADD_URL,
        {
            "workflow": workflow_choice("versioned", "v1"),
            "input": '{"user_id": 7}',
            "available_at": (timezone.localtime() + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"),
            "deadline_at": (timezone.localtime() + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
            "idempotency_key": "start-7",
        },
    )
    run = WorkflowRun.objects.get()
    assert response.status_code == 302 and response["Location"] == run_url(run)
    assert (run.workflow_name, run.version, run.input, run.idempotency_key) == (
        "versioned",
        "v1",
        {"user_id": 7},
        "start-7",
    )
    assert run.available_at > timezone.now() + timedelta(minutes=58)
    assert run.deadline_at > run.available_at
    # The same key again: no second run, the first one is shown.
    again = admin_client.post(
        ADD_URL,
        {"workflow": workflow_choice("versioned", "v1"), "input": "{}", "idempotency_key": "start-7"},
        follow=True,
    )
    assert again.redirect_chain[-1][0] == run_url(run)
    assert any("already exists" in m for m in messages_of(again))
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_start_form_empty_input_is_null(admin_client: Any) -> None:
    admin_client.post(ADD_URL, {"workflow": workflow_choice("three-steps", None), "input": ""})
    assert WorkflowRun.objects.get().input is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"input": "{not json"}, "input", "Not valid JSON"),
        ({"input": "NaN"}, "input", "NaN"),
        ({"workflow": workflow_choice("nope", "v1")}, "workflow", "Select a valid choice"),
        ({"deadline_at": "2001-01-01T00:00"}, "deadline_at", "already in the past"),
        (
            {"available_at": "2999-01-02T00:00", "deadline_at": "2999-01-01T00:00"},
            "deadline_at",
            "after the start time",
        ),
        ({"available_at": "yesterday"}, "available_at", "Enter a valid date/time"),
    ],
)
def test_start_form_rejects_bad_input(admin_client: Any, data: dict[str, str], field: str, message: str) -> None:
    response = admin_client.post(ADD_URL, {"workflow": workflow_choice("three-steps", None), "input": "{}", **data})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert "errornote" in response.content.decode()
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
def test_forms_refuse_names_and_keys_no_database_can_store() -> None:
    # A browser cannot send a lone surrogate, but code using the forms can: refused before any query.
    start = StartRunForm(
        {"workflow": workflow_choice("three-steps", None), "input": "{}", "idempotency_key": "k\ud800"}
    )
    assert not start.is_valid() and "surrogate" in start.errors["idempotency_key"][0]
    signal = SendSignalForm({"name": "go\ud800", "json_data": "1", "idempotency_key": "k\x00"})
    assert not signal.is_valid() and "surrogate" in signal.errors["name"][0]
    assert "idempotency_key" in signal.errors


# -- sending a signal ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_send_signal_to_a_waiting_run_delivers_it_now(admin_client: Any) -> None:
    run, wait = waiting_for_signal()
    page = admin_client.get(run_url(run)).content.decode()
    assert signal_url(run) in page and "csrfmiddlewaretoken" in page
    response = admin_client.post(
        signal_url(run), {"name": "approval", "json_data": '{"by": "ada"}', "idempotency_key": ""}, follow=True
    )
    assert response.redirect_chain[-1][0] == run_url(run)
    assert any("delivered" in m for m in messages_of(response)), messages_of(response)
    wait.refresh_from_db()
    signal = Signal.objects.get()
    assert wait.status == "completed" and wait.output == {"signal_id": signal.id, "data": {"by": "ada"}}
    assert signal.consumed_by_id == wait.id


@pytest.mark.django_db
def test_send_signal_to_a_run_not_waiting_buffers_it(admin_client: Any) -> None:
    run = make_run()
    response = admin_client.post(
        signal_url(run), {"name": "approval", "json_data": "", "idempotency_key": "k"}, follow=True
    )
    assert any("buffered" in m for m in messages_of(response)), messages_of(response)
    signal = Signal.objects.get()
    assert (signal.name, signal.data, signal.idempotency_key, signal.consumed_by_id) == ("approval", None, "k", None)
    # Sending again with the same key delivers once.
    admin_client.post(signal_url(run), {"name": "approval", "json_data": "1", "idempotency_key": "k"})
    assert Signal.objects.count() == 1
    assert "approval" in admin_client.get(run_url(run)).content.decode()


@pytest.mark.django_db
def test_send_signal_with_bad_json_shows_the_error_and_sends_nothing(admin_client: Any) -> None:
    run = make_run()
    response = admin_client.post(signal_url(run), {"name": "approval", "json_data": "{nope"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "Not valid JSON" in html and "line 1, column 2" in html
    assert any("Signal not sent" in m for m in messages_of(response))
    assert "{nope" in html  # the form keeps what was typed
    response = admin_client.post(signal_url(run), {"name": "  ", "json_data": "1"})
    assert response.status_code == 200 and any("Signal not sent" in m for m in messages_of(response))
    assert not Signal.objects.exists()


@pytest.mark.django_db
def test_send_signal_to_a_finished_run_is_an_error_and_the_form_is_not_offered(admin_client: Any) -> None:
    run = make_run(status="completed", finished_at=timezone.now())
    assert signal_url(run) not in admin_client.get(run_url(run)).content.decode()
    response = admin_client.post(signal_url(run), {"name": "approval", "json_data": "1"}, follow=True)
    assert any("not sent" in m and "completed" in m for m in messages_of(response)), messages_of(response)
    assert not Signal.objects.exists()
