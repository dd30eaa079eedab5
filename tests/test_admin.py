"""The admin through Django's test client: list, filters, search, run page, actions, start form, permissions."""

from __future__ import annotations

import json
import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_openworkflow.admin.forms import SendSignalForm, StartRunForm
from django_openworkflow.admin.journal import journal_rows
from django_openworkflow.admin.timeline import build_timeline
from django_openworkflow.conf import owf_settings
from django_openworkflow.formatting import format_duration
from django_openworkflow.models import Signal, StepAttempt, WorkflowRun
from tests.conftest import wait_until
from tests.testapp.workflows import always_fails, sleeper, three_steps

LIST_URL = reverse("admin:django_openworkflow_workflowrun_changelist")
ADD_URL = reverse("admin:django_openworkflow_workflowrun_add")
XSS = "<script>alert(1)</script>"


def run_url(run: WorkflowRun | Any) -> str:
    return reverse("admin:django_openworkflow_workflowrun_change", args=[getattr(run, "id", run)])


def action_url(run: WorkflowRun, action: str) -> str:
    return reverse("admin:django_openworkflow_workflowrun_action", args=[run.id, action])


def make_run(**fields: Any) -> WorkflowRun:
    values: dict[str, Any] = {
        "workflow_name": "three-steps",
        "version": None,
        "status": "pending",
        "input": {"start": 1},
        "available_at": timezone.now(),
    }
    values.update(fields)
    return WorkflowRun.objects.create(**values)


def make_attempt(run: WorkflowRun, step_name: str, **fields: Any) -> StepAttempt:
    started = fields.pop("started_at", timezone.now())
    values: dict[str, Any] = {
        "kind": "run",
        "status": "completed",
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=20),
    }
    values.update(fields)
    return StepAttempt.objects.create(workflow_run=run, step_name=step_name, **values)


def one_of_each() -> dict[str, WorkflowRun]:
    """A run in every display status."""
    now = timezone.now()
    return {
        "pending": make_run(),
        "running": make_run(
            status="running", worker_id="w-1", started_at=now, available_at=now + timedelta(seconds=30)
        ),
        "parked": make_run(
            workflow_name="sleeper",
            status="running",
            started_at=now,
            available_at=now + timedelta(minutes=4, seconds=30),
        ),
        "completed": make_run(
            status="completed", output={"result": 11}, started_at=now, finished_at=now + timedelta(seconds=2)
        ),
        "failed": make_run(
            workflow_name="always-fails",
            status="failed",
            error={"type": "ValueError", "message": "kaboom"},
            started_at=now,
            finished_at=now,
        ),
        "canceled": make_run(workflow_name="versioned", version="v1", status="canceled", finished_at=now),
    }


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Any:
    """A logged-in staff user holding only the given permissions ("view", "change", "add")."""

    def login(*actions: str) -> Any:
        user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
        for action in actions:
            user.user_permissions.add(
                Permission.objects.get(codename=f"{action}_workflowrun", content_type__app_label="django_openworkflow")
            )
        client.force_login(user)
        return client

    return login


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


# -- the run list ----------------------------------------------------------------


@pytest.mark.django_db
def test_list_shows_every_run_with_a_badge_and_status_counts(admin_client: Any) -> None:
    runs = one_of_each()
    response = admin_client.get(LIST_URL)
    assert response.status_code == 200
    html = response.content.decode()
    for status, run in runs.items():
        assert str(run.id)[:8] in html
        assert f'owf-badge owf-status-{status}">{status}<' in html
    counts = {item["status"]: item["count"] for item in response.context["status_counts"]}
    assert counts == {
        **{s: 1 for s in ("pending", "running", "parked", "completed", "failed", "canceled")},
        "continued": 0,
    }
    assert response.context["status_total"] == 6
    assert "Start a run" in html


@pytest.mark.django_db
def test_list_is_newest_first(admin_client: Any) -> None:
    old = make_run(idempotency_key="old")
    WorkflowRun.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=1))
    new = make_run()
    ids = [run.id for run in admin_client.get(LIST_URL).context["cl"].result_list]
    assert ids == [new.id, old.id]


def _list_queries(client: Any, url: str = LIST_URL) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


@pytest.mark.django_db
def test_list_issues_a_constant_number_of_queries(admin_client: Any, django_assert_max_num_queries: Any) -> None:
    one_of_each()
    make_run(workflow_name="wf-1")
    filtered_url = LIST_URL + "?status=pending&workflow=wf-1&q=wf"
    few, few_filtered = _list_queries(admin_client), _list_queries(admin_client, filtered_url)
    for i in range(60):
        make_run(workflow_name=f"wf-{i % 7}", version=f"v{i % 3}", idempotency_key=f"k{i}")
    assert _list_queries(admin_client) == few
    assert _list_queries(admin_client, filtered_url) == few_filtered == few + 1  # + the chosen workflow's versions
    with django_assert_max_num_queries(6):
        admin_client.get(LIST_URL)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=pending", {"pending"}),
        ("status=running", {"running"}),
        ("status=parked", {"parked"}),
        ("status=completed", {"completed"}),
        ("status=failed", {"failed"}),
        ("status=canceled", {"canceled"}),
        ("workflow=sleeper", {"parked"}),
        ("workflow=three-steps", {"pending", "running", "completed"}),
        ("workflow=versioned&version=v1", {"canceled"}),
        ("workflow=three-steps&version=-", {"pending", "running", "completed"}),
        ("version=v1", {"canceled"}),
        ("version=-", {"pending", "running", "parked", "completed", "failed"}),
        ("workflow=three-steps&status=completed", {"completed"}),
    ],
)
def test_list_filters(admin_client: Any, query: str, expected: set[str]) -> None:
    runs = one_of_each()
    response = admin_client.get(f"{LIST_URL}?{query}")
    assert response.status_code == 200
    shown = {run.id for run in response.context["cl"].result_list}
    assert shown == {runs[status].id for status in expected}


@pytest.mark.django_db
def test_workflow_filter_lists_names_and_version_filter_follows_the_workflow(admin_client: Any) -> None:
    one_of_each()
    make_run(workflow_name="versioned", version="v2")
    make_run(workflow_name="versioned", version=None)

    def choices(query: str) -> dict[str, list[str]]:
        cl = admin_client.get(LIST_URL + query).context["cl"]
        return {spec.title: [label for _, label in getattr(spec, "lookup_choices", [])] for spec in cl.filter_specs}

    everything = choices("")
    assert everything["workflow"] == ["always-fails", "sleeper", "three-steps", "versioned"]
    assert "version" not in everything  # versions belong to a workflow: shown once one is chosen
    assert choices("?workflow=versioned")["version"] == ["(none)", "v1", "v2"]


@pytest.mark.django_db
def test_created_date_filter(admin_client: Any) -> None:
    recent = make_run()
    old = make_run()
    WorkflowRun.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=40))
    # The filter's own "Past 7 days" link carries an aware timestamp.
    since = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=7)
    response = admin_client.get(LIST_URL, {"created_at__gte": str(since)})
    assert [run.id for run in response.context["cl"].result_list] == [recent.id]


@pytest.mark.django_db
def test_status_counts_follow_the_other_filters_and_link_to_the_status(admin_client: Any) -> None:
    one_of_each()
    response = admin_client.get(LIST_URL + "?workflow=three-steps&status=completed")
    items = {item["status"]: item for item in response.context["status_counts"]}
    assert {s: i["count"] for s, i in items.items()} == {
        "pending": 1,
        "running": 1,
        "parked": 0,
        "completed": 1,
        "failed": 0,
        "canceled": 0,
        "continued": 0,
    }
    assert items["completed"]["active"] and not items["pending"]["active"]
    assert "workflow=three-steps" in items["failed"]["url"] and "status=failed" in items["failed"]["url"]


@pytest.mark.django_db
def test_search_by_id_short_id_name_and_idempotency_key(admin_client: Any) -> None:
    runs = one_of_each()
    keyed = make_run(workflow_name="onboard", idempotency_key="order-42")

    def search(term: str) -> set[uuid.UUID]:
        response = admin_client.get(LIST_URL, {"q": term})
        assert response.status_code == 200
        return {run.id for run in response.context["cl"].result_list}

    target = runs["failed"]
    assert search(str(target.id)) == {target.id}
    assert search(str(target.id).upper()) == {target.id}
    assert target.id in search(str(target.id)[:8])
    assert search("always") == {target.id}
    assert search("order-42") == {keyed.id}
    assert search("order-4") == set()  # keys match exactly
    assert search(str(uuid.uuid4())) == set()
    assert search("no such thing") == set()


# -- the run page ----------------------------------------------------------------


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


def parked_in_a_sleep() -> WorkflowRun:
    """The parked run of one_of_each(), with its open sleep in the journal."""
    run = one_of_each()["parked"]
    make_attempt(
        run,
        "nap",
        kind="sleep",
        status="running",
        finished_at=None,
        context={"resume_at": run.available_at.isoformat()},
    )
    return run


@pytest.mark.django_db
def test_run_page_of_a_parked_run_says_when_it_wakes(admin_client: Any) -> None:
    run = parked_in_a_sleep()
    html = admin_client.get(run_url(run)).content.decode()
    assert re.search(r"wakes in 4 m( \d+ s)?", html)
    assert "owf-bar-sleep" in html and "owf-tl-now" in html


@pytest.mark.django_db
def test_run_canceled_during_a_sleep_ends_its_sleep_bar_at_the_cancel(admin_client: Any) -> None:
    start = timezone.now() - timedelta(minutes=10)
    run = make_run(
        workflow_name="sleeper", status="canceled", started_at=start, finished_at=start + timedelta(seconds=30)
    )
    make_attempt(run, "before", started_at=start)
    make_attempt(
        run,
        "nap",
        kind="sleep",
        status="running",
        started_at=start + timedelta(seconds=1),
        finished_at=None,
        context={"resume_at": (start + timedelta(hours=1)).isoformat()},
    )
    response = admin_client.get(run_url(run))
    nap = response.context["journal"][1]
    assert nap.duration == "29 s" and "still open when the run ended" in nap.note
    timeline = response.context["timeline"]
    assert timeline.span == "30 s" and timeline.now_left is None
    bar = timeline.rows[1].bars[0]
    assert round(bar.left + bar.width) == 100
    assert "No output." in response.content.decode()


@pytest.mark.django_db
def test_run_page_of_a_scheduled_run_says_when_it_starts(admin_client: Any) -> None:
    run = make_run(available_at=timezone.now() + timedelta(hours=2, minutes=1))
    html = admin_client.get(run_url(run)).content.decode()
    assert "starts in 2 h" in html and "No step has started yet." in html
    assert action_url(run, "retry_now") in html  # "retry now" starts it at once


@pytest.mark.django_db
def test_waits_are_hatched_bars(admin_client: Any) -> None:
    run = make_run(status="running")
    make_attempt(run, "child", kind="workflow", status="completed", output={"ok": 1})
    make_attempt(run, "approval", kind="signal", status="failed", error={"type": "Timeout", "message": "no signal"})
    make_attempt(run, "paid", kind="event", status="running", finished_at=None)
    rows = admin_client.get(run_url(run)).context["timeline"].rows
    assert [row.bars[0].css for row in rows] == ["owf-bar-wait", "owf-bar-failed owf-bar-wait", "owf-bar-wait"]


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
    assert len(few) == len(many) <= 6


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


@pytest.mark.django_db
def test_workflow_name_is_escaped_in_the_list(admin_client: Any) -> None:
    make_run(workflow_name=XSS, version=XSS)
    html = admin_client.get(LIST_URL).content.decode()
    assert XSS not in html and "&lt;script&gt;" in html


# -- actions on the run page -------------------------------------------------------


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


# -- list actions ---------------------------------------------------------------------


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


# -- permissions ------------------------------------------------------------------------


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


# -- starting a run ------------------------------------------------------------------------


def _choice(name: str, version: str | None) -> str:
    return json.dumps([name, version])


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
            "workflow": _choice("versioned", "v1"),
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
        ADD_URL, {"workflow": _choice("versioned", "v1"), "input": "{}", "idempotency_key": "start-7"}, follow=True
    )
    assert again.redirect_chain[-1][0] == run_url(run)
    assert any("already exists" in m for m in messages_of(again))
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
def test_start_form_empty_input_is_null(admin_client: Any) -> None:
    admin_client.post(ADD_URL, {"workflow": _choice("three-steps", None), "input": ""})
    assert WorkflowRun.objects.get().input is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"input": "{not json"}, "input", "Not valid JSON"),
        ({"input": "NaN"}, "input", "NaN"),
        ({"workflow": _choice("nope", "v1")}, "workflow", "Select a valid choice"),
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
    response = admin_client.post(ADD_URL, {"workflow": _choice("three-steps", None), "input": "{}", **data})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert "errornote" in response.content.decode()
    assert WorkflowRun.objects.count() == 0


# -- with real workers ---------------------------------------------------------------------


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


# -- helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.35, "350 ms"),
        (4.2, "4.2 s"),
        (42, "42 s"),
        (252, "4 m 12 s"),
        (3600, "1 h"),
        (7500, "2 h 5 m"),
        (90000, "1 d 1 h"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


@pytest.mark.django_db
def test_timeline_of_a_run_without_steps_is_none() -> None:
    run = make_run()
    assert build_timeline(run, journal_rows([], timezone.now()), timezone.now()) is None


# -- signals and events -------------------------------------------------------------


def signal_url(run: WorkflowRun | Any) -> str:
    return reverse("admin:django_openworkflow_workflowrun_signal", args=[getattr(run, "id", run)])


def waiting_for_signal(name: str = "approval", **fields: Any) -> tuple[WorkflowRun, StepAttempt]:
    """A parked run whose journal ends in an open wait for signal ``name``."""
    now = timezone.now()
    run = make_run(workflow_name="approval", status="running", started_at=now, **fields)
    wait = make_attempt(
        run,
        name,
        kind="signal",
        status="running",
        finished_at=None,
        context={"signal": name, "timeout_at": (now + timedelta(hours=1)).isoformat()},
    )
    return run, wait


@pytest.mark.django_db
def test_journal_shows_what_each_wait_waits_for_its_timeout_and_what_arrived(admin_client: Any) -> None:
    now = timezone.now()
    timeout = now + timedelta(days=7)
    run = make_run(status="running", started_at=now)
    ctx = {"timeout_at": timeout.isoformat()}
    make_attempt(run, "got", kind="signal", context={"signal": "approval", **ctx}, output={"signal_id": 7, "data": XSS})
    make_attempt(run, "late", kind="signal", context={"signal": "second-look", **ctx}, output={"timed_out": True})
    make_attempt(
        run,
        "paid",
        kind="event",
        context={"event": "order.paid", "match": {"order_id": 42}, **ctx},
        output={"event_id": 3, "payload": {"order_id": 42, "amount": 10}},
    )
    make_attempt(run, "open", kind="signal", status="running", finished_at=None, context={"signal": "more", **ctx})
    response = admin_client.get(run_url(run))
    html = response.content.decode()
    waits = [row.wait for row in response.context["journal"]]
    assert [w.label for w in waits] == [
        'signal "approval"',
        'signal "second-look"',
        'event "order.paid" matching {"order_id":42}',
        'signal "more"',
    ]
    assert [w.state for w in waits] == ["arrived", "timed out", "arrived", "waiting"]
    assert [w.source for w in waits] == ["signal #7", "", "event #3", ""]
    assert all(
        w.timeout and w.timeout.endswith(timeout.astimezone(timezone.get_current_timezone()).strftime("%S.%f")[:-3])
        for w in waits
    )
    assert "times out at" in html and "timed out: nothing arrived" in html
    assert "&quot;order.paid&quot; matching {&quot;order_id&quot;:42}" in html
    assert "&quot;amount&quot;: 10" in html
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The wait's raw output is not repeated as a plain step output.
    assert "signal_id" not in html and "timed_out" not in html


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
    assert len(few) == len(many) <= 7


# -- hostile stored data is shown escaped, never a 500 ------------------------------------------------

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
def test_filters_with_a_nul_find_nothing_instead_of_failing(admin_client: Any) -> None:
    # (Django's own search form refuses a NUL in the search box.)
    make_run()
    for query in ("workflow=a%00b", "workflow=three-steps&version=v%001"):
        response = admin_client.get(f"{LIST_URL}?{query}")
        assert response.status_code == 200, query
        assert list(response.context["cl"].result_list) == [], query


# -- actions that would do nothing refuse, saying why ------------------------------------------------


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


# -- what a held run is executing -------------------------------------------------------------------


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


@pytest.mark.django_db
def test_a_form_shown_again_keeps_the_lines_the_browser_sent(admin_client: Any) -> None:
    # Browsers send a textarea's lines as CRLF: the page's escaping must leave them be.
    response = admin_client.post(ADD_URL, {"workflow": _choice("three-steps", None), "input": '{\r\n  "a": nope\r\n}'})
    html = response.content.decode()
    assert "{\r\n  &quot;a&quot;: nope\r\n}" in html and "\\r" not in html


@pytest.mark.django_db
def test_forms_refuse_names_and_keys_no_database_can_store() -> None:
    # A browser cannot send a lone surrogate, but code using the forms can: refused before any query.
    start = StartRunForm({"workflow": _choice("three-steps", None), "input": "{}", "idempotency_key": "k\ud800"})
    assert not start.is_valid() and "surrogate" in start.errors["idempotency_key"][0]
    signal = SendSignalForm({"name": "go\ud800", "json_data": "1", "idempotency_key": "k\x00"})
    assert not signal.is_valid() and "surrogate" in signal.errors["name"][0]
    assert "idempotency_key" in signal.errors


# -- flow control: queue, priority, limits, blocked runs --------------------------------


def blocked_run(**fields: Any) -> WorkflowRun:
    from tests.flow_display_workflows import blocked_run_fields

    return make_run(**blocked_run_fields(**fields))


@pytest.mark.django_db
def test_list_shows_the_queue_and_priority_and_filters_by_queue(admin_client: Any) -> None:
    plain = make_run()
    urgent = make_run(workflow_name="send-mail", queue="emails", priority=5)
    report = make_run(workflow_name="report", queue="reports", status="running")
    archived = make_run(workflow_name="report", queue="archive", status="completed")  # only finished runs there
    response = admin_client.get(LIST_URL)
    html = response.content.decode()
    assert "column-queue" in html
    assert '<code class="owf-queue">emails</code>' in html and "priority 5" in html
    assert '<code class="owf-queue">default</code>' in html and "priority 0" not in html
    specs = {spec.title: spec for spec in response.context["cl"].filter_specs}
    offered = [label for _, label in specs["queue"].lookup_choices]
    assert {"default", "emails", "reports"} <= set(offered) and "archive" not in offered
    assert "By queue" in html

    def shown(query: str) -> set[uuid.UUID]:
        page = admin_client.get(LIST_URL + query)
        assert page.status_code == 200
        return {run.id for run in page.context["cl"].result_list}

    assert shown("?queue=emails") == {urgent.id}
    assert shown("?queue=default") == {plain.id}
    assert shown("?queue=reports&status=parked") == {report.id}  # running, no worker holds it
    assert shown("?queue=reports&status=pending") == set()
    assert shown("?queue=archive") == {archived.id}  # not offered, but a URL still filters by it
    assert shown("?queue=no%20such%20queue!") == set()
    # The choices come with the workflow names' query: a queue filter costs no query of its own.
    assert _list_queries(admin_client, LIST_URL + "?queue=emails") == _list_queries(admin_client)


@pytest.mark.django_db
def test_queue_filter_is_hidden_while_there_is_one_queue(admin_client: Any) -> None:
    from django_openworkflow.registry import registry

    make_run()
    response = admin_client.get(LIST_URL)
    titles = [spec.title for spec in response.context["cl"].filter_specs]
    if {spec.queue for spec in registry.all()} <= {"default"}:
        assert "queue" not in titles
    chosen = admin_client.get(LIST_URL + "?queue=default").context["cl"]
    assert "queue" in [spec.title for spec in chosen.filter_specs]


@pytest.mark.django_db
def test_search_finds_runs_by_queue_and_concurrency_key(admin_client: Any) -> None:
    make_run()
    in_queue = make_run(queue="emails")
    keyed = blocked_run()
    rated = make_run(rate_key="api/acme", rate_limit=10, rate_period=1.0)

    def search(term: str) -> set[uuid.UUID]:
        return {run.id for run in admin_client.get(LIST_URL, {"q": term}).context["cl"].result_list}

    assert search("emails") == {in_queue.id}
    assert search("charge/42") == {keyed.id}
    assert search("api/acme") == {rated.id}


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
    from tests.flow_display_workflows import charge

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
