"""A workflow's admin page (admin/workflow_page.py, store/workflow_page.py): its figures from known runs, its links."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from html import unescape
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.urls import reverse

from django_openworkflow import Schedule, workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import Schedule as ScheduleRow
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend, workflow_page
from tests.admin.helpers import LIST_URL, make_run, run_url

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "wfpage-charge"
URL = reverse("admin:django_openworkflow_workflowrun_workflow", args=[NAME])


@pytest.fixture
def registered() -> Iterator[None]:
    """Two versions of NAME in this process, the highest with a schedule."""
    specs = [
        workflow(name=NAME, version="v1")(lambda ctx: None),
        workflow(name=NAME, version="v2", schedule=Schedule("0 3 * * *", timezone="UTC"))(lambda ctx: None),
    ]
    yield
    for spec in specs:
        registry.unregister(spec.name, spec.version)


def finished(status: str, ended_ago: timedelta, took: timedelta, now: Any, **fields: Any) -> WorkflowRun:
    end = now - ended_ago
    values = {"workflow_name": NAME, "version": "v2", "status": status, "input": {}, "available_at": end}
    values.update({"started_at": end - took, "finished_at": end, **fields})
    return WorkflowRun.objects.create(**values)


@pytest.fixture
def seeded() -> Any:
    """20 runs of NAME that took 1 .. 20 s (17 completed, 3 failed) 5 minutes ago, others that must not count."""
    now = get_backend().now().replace(microsecond=0)
    for seconds in range(1, 21):
        failed = seconds in (3, 11, 20)
        error = {"type": "ValueError", "message": f"card {seconds} declined", "step": "charge"} if failed else None
        ended_ago = timedelta(minutes=5, seconds=-seconds)  # the longer, the later it ended: "card 20" is the latest
        finished("failed" if failed else "completed", ended_ago, timedelta(seconds=seconds), now, error=error)
    finished("canceled", timedelta(minutes=6), timedelta(seconds=500), now, version="v1")  # the p95 is not 500 s
    finished("completed", timedelta(hours=5), timedelta(seconds=900), now)  # outside the 3 hours shown by default
    finished("completed", timedelta(minutes=5), timedelta(seconds=900), now, workflow_name="other")  # another workflow
    finished("completed", timedelta(minutes=5), timedelta(seconds=1), now, started_at=None)  # no start: no duration
    make_run(workflow_name=NAME, status="running", available_at=now + timedelta(minutes=5), error={"type": "E"})
    make_run(workflow_name=NAME, status="pending", version=None)
    return now


def test_known_durations_give_known_percentiles(seeded: Any) -> None:
    figures = workflow_page.read(NAME, seeded - timedelta(hours=3), seeded)
    # 21 timed runs: 1 .. 20 s and 500 s. Nearest rank: p50 is the 11th (11 s), p95 the 20th (20 s).
    assert figures.timed == 21 and figures.p50 == timedelta(seconds=11) and figures.p95 == timedelta(seconds=20)
    assert figures.finished == {"completed": 18, "failed": 3, "canceled": 1}
    assert figures.failure_rate == pytest.approx(3 / 21)
    assert figures.by_status["retrying"] == 1 and figures.by_status["pending"] == 1 and figures.total == 25
    assert figures.versions == [None, "v1", "v2"]
    assert [f.error["message"] for f in figures.failures] == ["card 20 declined", "card 11 declined", "card 3 declined"]
    # Over a day the 900 s run counts: 22 runs, p50 the 11th, p95 the 21st (500 s).
    day = workflow_page.read(NAME, seeded - timedelta(hours=24), seeded)
    assert (day.timed, day.p50, day.p95) == (22, timedelta(seconds=11), timedelta(seconds=500))


def test_one_run_and_none(seeded: Any) -> None:
    lone = workflow_page.read("other", seeded - timedelta(hours=1), seeded)
    assert lone.timed == 1 and lone.p50 == lone.p95 == timedelta(seconds=900)
    empty = workflow_page.read(NAME, seeded - timedelta(days=9), seeded - timedelta(days=8))
    assert empty.timed == 0 and empty.p50 is None and empty.p95 is None and empty.failure_rate is None
    assert empty.failures == [] and empty.total == 25  # the counts by status are of every run, now


def test_the_page_shows_the_figures_and_links_them(admin_client: Any, seeded: Any, registered: None) -> None:
    ScheduleRow.objects.create(name=NAME, cron="0 3 * * *", timezone="UTC", paused=True)
    response = admin_client.get(URL)
    assert response.status_code == 200
    page = response.content.decode()
    assert response.context["p50"] == "11 s" and response.context["p95"] == "20 s"
    assert '<div class="owf-card-number owf-p95">20 s</div>' in page and "14.3 %" in page
    # Counts by status link to the list filtered by this workflow and that status.
    by_status = {status: (count, url) for status, _, count, url in response.context["by_status"]}
    assert by_status["retrying"][0] == 1
    assert parse_qs(urlsplit(by_status["retrying"][1]).query) == {"workflow": [NAME], "status": ["retrying"]}
    # The failed card's link lists the runs it counts.
    listed = admin_client.get(response.context["failed_url"])
    assert listed.status_code == 200 and listed.context["cl"].result_count == 3
    assert admin_client.get(response.context["finished_url"]).context["cl"].result_count == 22
    # The latest failures link to their runs; the versions registered and seen; the schedule links to its page.
    newest = WorkflowRun.objects.filter(workflow_name=NAME, status="failed").order_by("-started_at").first()
    assert run_url(newest) in page and "ValueError: card 20 declined" in page
    assert [v for v, _, _ in response.context["specs"]] == ["v1", "v2"]
    # The chart: its bars hold the range's runs, each bar a link to its own (no run in two bars).
    bars = [bucket.total for bucket in response.context["figures"].buckets if bucket.total]
    links = re.findall(r'<a href="([^"]+)"><rect class="owf-chart-', page)
    assert sum(bars) == 22 and len(links) == len(bars)
    assert [admin_client.get(unescape(link)).context["cl"].result_count for link in links] == bars
    assert reverse("admin:django_openworkflow_schedule_change", args=[ScheduleRow.objects.get().pk]) in page
    # The start form offers this workflow's versions only, the highest chosen, and posts to the start view.
    choices = [label for _, label in response.context["start_form"].fields["workflow"].choices]
    assert choices == [f"{NAME} (v1)", f"{NAME} (v2)"]
    assert f'action="{reverse("admin:django_openworkflow_workflowrun_add")}"' in page


def test_links_to_the_page_from_the_list_the_run_and_the_dashboard(admin_client: Any, seeded: Any) -> None:
    run = WorkflowRun.objects.filter(workflow_name=NAME).first()
    for url in (LIST_URL, run_url(run), reverse("admin:django_openworkflow_workflowrun_dashboard")):
        assert f'href="{URL}"' in admin_client.get(url).content.decode(), url


def test_a_workflow_known_only_from_its_runs_and_unknown_ones(admin_client: Any, seeded: Any) -> None:
    page = admin_client.get(URL)  # not registered here: no start form, said so
    assert page.status_code == 200 and page.context["start_form"] is None
    assert "not registered" in page.content.decode()
    assert admin_client.get(reverse("admin:django_openworkflow_workflowrun_workflow", args=["nope"])).status_code == 404
    odd = reverse("admin:django_openworkflow_workflowrun_workflow", args=["a/b?c=<d>"])
    assert admin_client.get(odd).status_code == 404
    assert admin_client.get(URL.replace(NAME, "bad%00name")).status_code == 404  # no database could store it


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"hours": "abc"}, "is not a whole number of hours"),
        ({"hours": "0"}, "must be from 1 to"),
        ({"hours": "99999999999999999999"}, "must be from 1 to"),
        ({"from": "yesterday"}, "is not a date and time"),
        ({"from": "2026-02-30T10:00"}, "is not a date and time"),
        ({"to": "2026-11-20T10:00"}, "From is missing"),
        ({"from": "2026-11-20T10:00", "to": "2026-11-20T09:00"}, "must start before it ends"),
        ({"from": "1990-01-01", "to": "2000-01-01"}, "at most"),
        ({"from": "9999-12-31T23:59"}, "must start before it ends"),
    ],
)
def test_a_bad_range_says_what_is_wrong_and_shows_the_default(
    admin_client: Any, seeded: Any, params: dict[str, str], message: str
) -> None:
    response = admin_client.get(URL, params)
    assert response.status_code == 200 and message in response.context["range_error"]
    assert response.context["range"].hours == 3 and 'class="errornote owf-range-error"' in response.content.decode()


def test_ranges_at_the_edges_of_what_databases_store(admin_client: Any, seeded: Any) -> None:
    """MariaDB's DATETIME starts at year 1000, SQLite and PostgreSQL's much earlier: no range is a 500."""
    for params in ({"from": "0500-01-01", "to": "0500-01-02"}, {"from": "0001-01-01T00:00", "to": "0001-01-03"}):
        response = admin_client.get(URL, params)
        assert response.status_code == 200 and response.context["figures"].timed == 0, params
    listed = admin_client.get(LIST_URL, {"created_from": "0001-01-01", "finished_to": "9999-12-31"})
    assert listed.status_code == 200


def test_a_free_range(admin_client: Any, seeded: Any) -> None:
    day = admin_client.get(URL, {"hours": "30"})
    assert day.context["range"].hours == 30 and day.context["figures"].timed == 22
    since = (seeded - timedelta(minutes=5, seconds=30)).isoformat()
    span = admin_client.get(URL, {"from": since, "to": seeded.isoformat()})
    assert span.context["range_error"] == "" and span.context["figures"].timed == 20  # the 1 .. 20 s runs only


def test_who_may_see_it(client: Any, staff_client: Any, seeded: Any, registered: None) -> None:
    assert client.get(URL).status_code == 302  # to the login page
    assert staff_client().get(URL).status_code == 403


def test_viewers_get_no_start_form(staff_client: Any, seeded: Any, registered: None) -> None:
    response = staff_client("view").get(URL)
    assert response.status_code == 200 and response.context["start_form"] is None
