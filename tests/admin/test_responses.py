"""Hostile stored data is shown escaped, never a 500 (admin/responses.py); what the browser sent is kept."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from django_openworkflow.models import Signal
from tests.admin.helpers import (
    ADD_URL,
    LIST_URL,
    action_url,
    make_attempt,
    make_run,
    messages_of,
    run_url,
    workflow_choice,
)

CONTROLS = "\x1b[2J\x07\x9b31m\u202e"
ESCAPED = "\\x1b[2J\\x07\\x9b31m\\u202e"


@pytest.mark.django_db
def test_control_characters_in_stored_text_are_shown_as_escapes(admin_client: Any) -> None:
    run = make_run(
        workflow_name=f"wf{CONTROLS}",
        version=f"v{CONTROLS}",
        status="failed",
        idempotency_key=f"key{CONTROLS}",
        input={f"in{CONTROLS}": 1},
        error={"type": "E", "message": f"msg{CONTROLS}"},
        finished_at=timezone.now(),
    )
    make_attempt(run, f"step{CONTROLS}", output=f"out{CONTROLS}")
    history = reverse("admin:django_openworkflow_workflowrun_history", args=[run.id])
    for url in (run_url(run), LIST_URL, f"{LIST_URL}?workflow={run.workflow_name}", history):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not any(c in html for c in "\x1b\x07\x9b\u202e"), url
        assert f"wf{ESCAPED}" in html, url
    html = admin_client.get(run_url(run)).content.decode()
    for shown in (f"key{ESCAPED}", f"msg{ESCAPED}", f"step{ESCAPED}", f"v{ESCAPED}"):
        assert shown in html, shown
    assert "\\u001b" in html  # the JSON payloads escape them as JSON does


@pytest.mark.skipif(connection.vendor != "sqlite", reason="only SQLite stores a lone surrogate (in JSON)")
@pytest.mark.django_db
def test_rows_holding_lone_surrogates_render_escaped(admin_client: Any) -> None:
    # Written before payloads were checked, or by other code: SQLite keeps a lone surrogate in JSON.
    run = make_run(
        status="running",
        started_at=timezone.now(),
        idempotency_key="key\x00",
        input={"\ud800": "\udfff"},
        output={"partial": "\ud83d"},
        error={"type": "E\ud800", "message": "m\x00\ud800", "traceback": "t\udcff", "extra": "\ud800"},
    )
    make_attempt(run, "out", output={"v": "\ud800"})
    make_attempt(run, "failed", status="failed", error={"type": "X\ud800", "message": "\ud800", "traceback": "\ud800"})
    make_attempt(run, "wait", kind="signal", status="running", finished_at=None, context={"signal": "s\ud800"})
    Signal.objects.create(workflow_run=run, name="go", data={"\ud800": "\udfff"})
    response = admin_client.get(run_url(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert "\\ud800" in html and "\\udfff" in html and "E\\ud800: m\\x00\\ud800" in html and "key\\x00" in html
    assert admin_client.get(LIST_URL).status_code == 200
    # "Retry now" names the wait it cannot help, escaped.
    refused = admin_client.post(action_url(run, "retry_now"), follow=True)
    assert refused.status_code == 200
    assert any("signal 's\\ud800'" in m for m in messages_of(refused)), messages_of(refused)


@pytest.mark.django_db
def test_a_form_shown_again_keeps_the_lines_the_browser_sent(admin_client: Any) -> None:
    # Browsers send a textarea's lines as CRLF: the page's escaping must leave them be.
    response = admin_client.post(
        ADD_URL, {"workflow": workflow_choice("three-steps", None), "input": '{\r\n  "a": nope\r\n}'}
    )
    html = response.content.decode()
    assert "{\r\n  &quot;a&quot;: nope\r\n}" in html and "\\r" not in html
