"""The run list (admin/changelist.py): columns, filters, search, status counts, the queue column, its cost."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_openworkflow.models import WorkflowRun
from tests.admin.helpers import LIST_URL, XSS, blocked_run, make_attempt, make_run, one_of_each, run_url


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
        "retrying": 0,
        "waiting": 0,
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


@pytest.mark.django_db
def test_a_run_taken_back_from_a_lost_lease_is_marked_in_the_list(admin_client: Any) -> None:
    taken = make_run(status="running", worker_id="w2", idempotency_key="taken")
    lost = {"type": "LeaseExpired", "message": "the worker running this step lost its lease", "step": "charge"}
    make_attempt(taken, "charge", status="failed", error=lost)
    make_attempt(taken, "charge", status="running", finished_at=None)
    plain = make_run(status="running", worker_id="w1", idempotency_key="plain")
    make_attempt(plain, "charge", status="failed", error={"type": "ValueError", "message": "no"})
    table_rows = admin_client.get(LIST_URL).content.decode().split("<tr")
    rows = {str(run.id): next(row for row in table_rows if str(run.id) in row) for run in (taken, plain)}
    assert 'class="owf-hint owf-taken-back"' in rows[str(taken.id)] and ">taken back<" in rows[str(taken.id)]
    assert "owf-taken-back" not in rows[str(plain.id)]


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
    # 7: the open waits of the page's runs; + 4: the due runs by queue, the database's clock (on PostgreSQL
    # and MariaDB), the live workers (none: the runs' queue is unserved) and the paused queues, for the
    # unserved queues' warning (store/workers.py).
    with django_assert_max_num_queries(11):
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
        "retrying": 0,
        "waiting": 0,
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


@pytest.mark.django_db
def test_workflow_name_is_escaped_in_the_list(admin_client: Any) -> None:
    make_run(workflow_name=XSS, version=XSS)
    html = admin_client.get(LIST_URL).content.decode()
    assert XSS not in html and "&lt;script&gt;" in html


@pytest.mark.django_db
def test_filters_with_a_nul_find_nothing_instead_of_failing(admin_client: Any) -> None:
    # (Django's own search form refuses a NUL in the search box.)
    make_run()
    for query in ("workflow=a%00b", "workflow=three-steps&version=v%001"):
        response = admin_client.get(f"{LIST_URL}?{query}")
        assert response.status_code == 200, query
        assert list(response.context["cl"].result_list) == [], query


# -- flow control: queue, priority, concurrency keys -----------------------------------------------


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
    from django_openworkflow.definitions.registry import registry

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
def test_list_and_run_page_show_what_priority_aging_raised_a_run_from(admin_client: Any) -> None:
    aged = make_run(workflow_name="send-mail", queue="emails", priority=3)
    WorkflowRun.objects.filter(id=aged.id).update(declared_priority=0)  # as the aging sweep leaves it
    assert "priority 3 (aged from 0)" in admin_client.get(LIST_URL).content.decode()
    page = admin_client.get(run_url(aged)).content.decode()
    assert "aged from 0 while it waits" in page
