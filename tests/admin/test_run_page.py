"""A run's page (admin/run_page.py): payloads, when it wakes or starts, links, signals, flow control, its cost."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_openworkflow.models import Signal, StepAttempt, WorkflowRun
from tests.admin.helpers import (
    LIST_URL,
    XSS,
    action_url,
    blocked_run,
    make_attempt,
    make_run,
    parked_in_a_sleep,
    run_url,
    waiting_for_signal,
)
from tests.conftest import wait_until
from tests.fixtures.testapp.workflows import always_fails, sleeper, three_steps


@pytest.mark.django_db
def test_run_page_shows_payloads_journal_attempt_numbers_and_timeline(admin_client: Any) -> None:
    start = timezone.now() - timedelta(seconds=10)
    run = make_run(
        status="completed",
        input={"user": 42},
        output={"ok": True},
        idempotency_key="signup-42",
        deadline_at=start + timedelta(hours=1),
        started_at=start,
        finished_at=start + timedelta(seconds=5),
    )
    make_attempt(run, "fetch", output={"id": 42}, started_at=start)
    error = {
        "type": "ValueError",
        "message": "flaky",
        "traceback": "Traceback (most recent call last):\nValueError: flaky\n",
    }
    make_attempt(run, "send", status="failed", error=error, started_at=start + timedelta(seconds=1))
    make_attempt(run, "send", output="sent", started_at=start + timedelta(seconds=2))
    make_attempt(
        run,
        "nap",
        kind="sleep",
        started_at=start + timedelta(seconds=3),
        finished_at=start + timedelta(seconds=4),
        output=None,
        context={"resume_at": (start + timedelta(seconds=4)).isoformat()},
    )
    response = admin_client.get(run_url(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert "&quot;user&quot;: 42" in html and "&quot;ok&quot;: true" in html
    assert "signup-42" in html
    numbers = [(row.attempt.step_name, row.number) for row in response.context["journal"]]
    assert numbers == [("fetch", 1), ("send", 1), ("send", 2), ("nap", 1)]
    assert "ValueError: flaky" in html and "Traceback (most recent call last)" in html
    timeline = response.context["timeline"]
    assert [row.label for row in timeline.rows] == ["fetch", "send", "nap"]
    send_bars = timeline.rows[1].bars
    assert [bar.css for bar in send_bars] == ["owf-bar-failed", "owf-bar-completed"]
    assert send_bars[0].left < send_bars[1].left  # the retry comes later on the same row
    assert timeline.rows[2].bars[0].css == "owf-bar-sleep"
    assert 'class="owf-tl-bar owf-bar-failed"' in html
    # Nothing editable: no form fields, only the action forms.
    main = html[html.index('id="content-main"') :]
    assert all('type="hidden"' in tag for tag in re.findall(r"<input[^>]*>", main))
    assert "<textarea" not in html


@pytest.mark.django_db
def test_run_page_of_a_parked_run_says_when_it_wakes(admin_client: Any) -> None:
    run = parked_in_a_sleep()
    html = admin_client.get(run_url(run)).content.decode()
    assert re.search(r"wakes in 4 m( \d+ s)?", html)
    assert "owf-bar-sleep" in html and "owf-tl-now" in html


@pytest.mark.django_db
def test_run_page_of_a_scheduled_run_says_when_it_starts(admin_client: Any) -> None:
    run = make_run(available_at=timezone.now() + timedelta(hours=2, minutes=1))
    html = admin_client.get(run_url(run)).content.decode()
    assert "starts in 2 h" in html and "No step has started yet." in html
    assert action_url(run, "retry_now") in html  # "retry now" starts it at once


@pytest.mark.django_db
def test_run_page_links_parent_and_child_runs(admin_client: Any) -> None:
    parent = make_run(workflow_name="parent", status="running")
    wait = make_attempt(
        parent, "child-wf", kind="workflow", status="running", finished_at=None, context={"workflow": "kid"}
    )
    child = make_run(workflow_name="kid", parent_step_attempt=wait)
    StepAttempt.objects.filter(id=wait.id).update(child_workflow_run=child)
    parent_html = admin_client.get(run_url(parent)).content.decode()
    assert run_url(child) in parent_html
    child_html = admin_client.get(run_url(child)).content.decode()
    assert run_url(parent) in child_html and "child-wf" in child_html


@pytest.mark.django_db
def test_run_page_issues_a_constant_number_of_queries(admin_client: Any) -> None:
    small = make_run()
    make_attempt(small, "a")
    big = make_run()
    for i in range(40):
        make_attempt(
            big, f"step-{i % 5}", status="failed" if i % 3 else "completed", error={"type": "E", "message": "m"}
        )
    with CaptureQueriesContext(connection) as few:
        admin_client.get(run_url(small))
    with CaptureQueriesContext(connection) as many:
        admin_client.get(run_url(big))
    assert len(few) == len(many) <= 10  # the re-runs of the run, the published values, the streams, the attributes


@pytest.mark.django_db
def test_run_page_of_an_unknown_run_is_404(admin_client: Any) -> None:
    assert admin_client.get(run_url(uuid.uuid4())).status_code == 404
    assert admin_client.get(LIST_URL + "not-a-uuid/change/").status_code == 404


@pytest.mark.django_db
def test_payloads_are_rendered_escaped(admin_client: Any) -> None:
    run = make_run(
        status="failed",
        input={"html": XSS},
        idempotency_key=XSS,
        error={"type": "ValueError", "message": XSS, "traceback": XSS},
    )
    make_attempt(run, XSS, output=XSS)
    make_attempt(run, "boom", status="failed", error={"type": XSS, "message": XSS, "traceback": XSS, "extra": XSS})
    for url in (run_url(run), LIST_URL, LIST_URL + "?q=" + XSS):
        html = admin_client.get(url).content.decode()
        assert XSS not in html, url
    html = admin_client.get(run_url(run)).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# -- what a held run is executing ------------------------------------------------------------------


@pytest.mark.django_db
def test_run_page_says_which_step_a_held_run_is_executing_and_for_how_long(admin_client: Any) -> None:
    now = timezone.now()
    run = make_run(status="running", worker_id="w-1", started_at=now - timedelta(minutes=3))
    make_attempt(run, "one")
    make_attempt(run, "charge-card", status="running", started_at=now - timedelta(minutes=2), finished_at=None)
    html = admin_client.get(run_url(run)).content.decode()
    assert "executing step &#x27;charge-card&#x27; for 2 m" in html
    StepAttempt.objects.filter(status="running").delete()
    assert "executing step" not in admin_client.get(run_url(run)).content.decode()


# -- signals sent to the run -----------------------------------------------------------------------


@pytest.mark.django_db
def test_pending_signals_block_lists_buffered_and_consumed_signals_escaped(admin_client: Any) -> None:
    run, wait = waiting_for_signal("other")
    done = make_attempt(run, "approval", kind="signal", context={"signal": "approval"}, output={"data": 1})
    Signal.objects.create(workflow_run=run, name="approval", data=1, consumed_by=done, consumed_at=timezone.now())
    Signal.objects.create(workflow_run=run, name=XSS, data={"note": XSS}, idempotency_key="k-1")
    Signal.objects.create(workflow_run=run, name="approval", data=[2])
    other_run = make_run()
    Signal.objects.create(workflow_run=other_run, name="not-mine", data=None)
    response = admin_client.get(run_url(run))
    html = response.content.decode()
    pending, consumed = response.context["pending_signals"], response.context["consumed_signals"]
    assert [(s.name, s.data) for s in pending] == [
        (XSS, '{\n  "note": "<script>alert(1)</script>"\n}'),
        ("approval", "[\n  2\n]"),
    ]
    assert [s.name for s in consumed] == ["approval"] and consumed[0].consumed
    assert "Pending signals" in html and "2 buffered, 1 consumed" in html
    assert "buffered" in html and "consumed" in html and "k-1" in html
    assert XSS not in html and "&lt;script&gt;" in html
    assert "not-mine" not in html


@pytest.mark.django_db
def test_run_page_without_signals_says_so(admin_client: Any) -> None:
    html = admin_client.get(run_url(make_run())).content.decode()
    assert "No signal has been sent to this run." in html


@pytest.mark.django_db
def test_run_page_with_waits_and_signals_issues_a_constant_number_of_queries(admin_client: Any) -> None:
    small, _ = waiting_for_signal()
    big, _ = waiting_for_signal()
    for i in range(30):
        kind = "signal" if i % 2 else "event"
        make_attempt(big, f"wait-{i}", kind=kind, context={kind: f"n{i}", "match": {"i": i}}, output={"data": i})
        Signal.objects.create(workflow_run=big, name=f"s{i}", data={"i": i})
    with CaptureQueriesContext(connection) as few:
        admin_client.get(run_url(small))
    with CaptureQueriesContext(connection) as many:
        admin_client.get(run_url(big))
    assert len(few) == len(many) <= 11  # the re-runs of the run, the published values, the streams, the attributes


# -- flow control: queue, priority, limits, blocked runs -------------------------------------------


@pytest.mark.django_db
def test_run_page_of_a_blocked_run_says_what_it_waits_for(admin_client: Any) -> None:
    run = blocked_run()
    html = admin_client.get(run_url(run)).content.decode()
    assert "Waiting for a place under concurrency key charge/42 (limit 2) since " in html
    assert "waiting for a concurrency place" in html  # the hint next to the title
    assert "9999-01-01" not in html and "Available at" not in html
    # The one run per key that asks again every second reads the same.
    probe = blocked_run(available_at=timezone.now() + timedelta(seconds=1))
    html = admin_client.get(run_url(probe)).content.decode()
    assert "Waiting for a place under concurrency key charge/42 (limit 2)" in html and "starts in" not in html
    # And the list says so next to the status, without the year 9999 either.
    listing = admin_client.get(LIST_URL).content.decode()
    assert listing.count("waiting for a concurrency place</span>") == 2 and "9999-01-01" not in listing


@pytest.mark.django_db
def test_run_page_of_a_run_given_a_place_again_shows_when_it_is_available(admin_client: Any) -> None:
    run = make_run(concurrency_key="charge/42", concurrency_limit=2, available_at=timezone.now() + timedelta(hours=1))
    html = admin_client.get(run_url(run)).content.decode()
    assert "Waiting for a place" not in html and "Available at" in html and "starts in" in html


@pytest.mark.django_db
def test_run_page_shows_the_queue_priority_and_limits(admin_client: Any) -> None:
    from tests.fixtures.flow_display_workflows import charge

    run = charge.run({"customer": 42}).fetch()
    html = admin_client.get(run_url(run)).content.decode()
    assert "<dt>Queue</dt><dd><code>payments</code></dd>" in html
    assert "<dt>Priority</dt><dd>5" in html
    assert "<code>flow-display-charge/42</code>: at most 2 at once" in html
    assert "parked runs keep their place" in html
    assert "<code>flow-display-charge</code>: 100 per minute" in html
    assert "Debounce key" not in html
    debounced = make_run(
        debounce_key="digest/7", concurrency_key="digest/7", concurrency_limit=1, rate_key="digest", rate_limit=5
    )
    WorkflowRun.objects.filter(id=debounced.id).update(rate_period=10.0)
    html = admin_client.get(run_url(debounced)).content.decode()
    assert "<dt>Debounce key</dt><dd><code>digest/7</code>" in html
    assert "parked runs give their place up" in html and "<code>digest</code>: 5 per 10 s" in html
    assert "<dt>Priority</dt><dd>0</dd>" in html


# -- with real workers -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_pages_of_runs_executed_by_a_worker(admin_client: Any, run_worker: Any) -> None:
    done = three_steps.run({"start": 4})
    failed = always_fails.run()
    sleeping = sleeper.run({"duration": "1h"})
    run_worker()
    html = admin_client.get(run_url(done.id)).content.decode()
    assert "&quot;result&quot;: 41" in html and html.count("owf-bar-completed") >= 3
    html = admin_client.get(run_url(failed.id)).content.decode()
    assert "ValueError: kaboom" in html and "Traceback" in html and "owf-bar-failed" in html
    page = admin_client.get(run_url(sleeping.id))
    assert 'owf-status-parked">parked<' in page.content.decode() and "wakes in 59 m" in page.content.decode()
    # "Retry now" ends the sleep; a worker then finishes the run.
    admin_client.post(action_url(sleeping.fetch(), "retry_now"))
    run_worker(until=lambda: sleeping.status() == "completed")
    # Retry from the failed step: the failed step runs again (and fails again).
    admin_client.post(action_url(failed.fetch(), "retry_failed"))
    run_worker()
    wait_until(lambda: failed.status() == "failed")
    numbers = [row.number for row in admin_client.get(run_url(failed.id)).context["journal"]]
    assert numbers == [1, 2]
