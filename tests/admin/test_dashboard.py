"""The admin's dashboard: its figures from known runs (store/dashboard.py), its page, who may see it."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils.html import escape

from django_openworkflow.admin.charts import nice_ticks
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import dashboard, get_backend
from tests.admin.helpers import messages_of

pytestmark = pytest.mark.django_db(transaction=True)

URL = reverse("admin:django_openworkflow_workflowrun_dashboard")


def finished(name: str, status: str, ended_ago: timedelta, took: timedelta, now: Any) -> WorkflowRun:
    end = now - ended_ago
    return WorkflowRun.objects.create(
        workflow_name=name, status=status, input={}, available_at=end, started_at=end - took, finished_at=end
    )


@pytest.fixture
def seeded() -> Any:
    """Runs that finished 5 and 65 minutes ago, and a queue with runs due; the clock they were written by."""
    now = get_backend().now().replace(second=30, microsecond=0)
    for seconds in range(1, 11):  # with the two failures: 1, 1, 1, 2 ... 10 s; p50 4 s, p95 10 s
        finished("charge", "completed", timedelta(minutes=5), timedelta(seconds=seconds), now)
    finished("charge", "failed", timedelta(minutes=5), timedelta(seconds=1), now)
    finished("charge", "failed", timedelta(minutes=65), timedelta(seconds=1), now)
    finished("mail", "canceled", timedelta(minutes=65), timedelta(milliseconds=200), now)
    finished("mail", "completed", timedelta(hours=5), timedelta(seconds=1), now)  # outside 3 hours
    for _ in range(3):
        WorkflowRun.objects.create(
            workflow_name="mail", status="pending", input={}, available_at=now - timedelta(minutes=2)
        )
    WorkflowRun.objects.create(
        workflow_name="mail", status="running", input={}, available_at=now + timedelta(minutes=1), worker_id="w1"
    )
    return now


def test_the_figures_of_the_last_three_hours(seeded: Any) -> None:
    data = dashboard.read(seeded, 3, 1)
    assert data.finished == {"completed": 10, "failed": 2, "canceled": 1}
    assert data.failure_rate == pytest.approx(2 / 12)
    by_start = {bucket.start: bucket.counts for bucket in data.buckets if bucket.total}
    five_ago = (seeded - timedelta(minutes=5)).replace(second=0)
    assert by_start == {
        five_ago: {"completed": 10, "failed": 1, "canceled": 0},
        five_ago - timedelta(hours=1): {"completed": 0, "failed": 1, "canceled": 1},
    }
    assert len(data.buckets) == 181 and data.buckets[-1].start == seeded.replace(second=0)
    charge, mail = data.durations
    assert (charge.workflow_name, charge.runs, charge.p50, charge.p95) == (
        "charge",
        12,
        timedelta(seconds=4),
        timedelta(seconds=10),
    )
    assert (mail.workflow_name, mail.runs, mail.p50) == ("mail", 1, timedelta(milliseconds=200))
    assert [(q.queue, q.due) for q in data.queues] == [("default", 3)] and data.in_flight == 1


def test_wider_buckets_over_a_day_and_nothing_in_the_last_hour(seeded: Any) -> None:
    day = dashboard.read(seeded, 24, 10)
    assert sum(bucket.total for bucket in day.buckets) == 14 and len(day.buckets) in (145, 146)
    assert all(bucket.minutes == 10 and bucket.start.minute % 10 == 0 for bucket in day.buckets)
    WorkflowRun.objects.filter(finished_at__gte=seeded - timedelta(minutes=30)).delete()
    hour = dashboard.read(seeded, 1, 1)
    assert hour.finished == {"completed": 0, "failed": 0, "canceled": 0} and hour.failure_rate is None
    assert hour.durations == []


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert dashboard.percentile(values, 50) == 50 and dashboard.percentile(values, 95) == 95
    assert dashboard.percentile([7.0], 95) == 7


def test_the_page_shows_the_charts_and_numbers(admin_client: Any, seeded: Any) -> None:
    response = admin_client.get(URL)
    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('class="owf-chart-completed"') == 1 and page.count('class="owf-chart-failed"') == 2
    assert "16.7 %" in page and "charge" in page and "p50 4.0 s · p95 10 s · 12 runs" in page
    assert response.context["due_total"] == 3 and response.context["hours"] == 3
    assert (
        reverse("admin:django_openworkflow_workflowrun_dashboard")
        in admin_client.get(reverse("admin:django_openworkflow_workflowrun_changelist")).content.decode()
    )


def test_the_empty_state_and_a_bad_range(admin_client: Any) -> None:
    response = admin_client.get(URL, {"hours": "1"})
    page = response.content.decode()
    assert response.status_code == 200 and "No run finished in the last hour." in page and "owf-chart" not in page
    bad = admin_client.get(URL, {"hours": "-5; DROP"})
    assert bad.status_code == 200 and bad.context["hours"] == 3


def test_who_may_see_it(client: Any, django_user_model: Any) -> None:
    assert client.get(URL).status_code == 302  # to the login page
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(URL).status_code == 403
    user.user_permissions.add(
        Permission.objects.get(codename="view_workflowrun", content_type__app_label="django_openworkflow")
    )
    assert client.get(URL).status_code == 200


def test_y_ticks_are_round_integers() -> None:
    assert nice_ticks(7) == [0, 2, 4, 6, 8] and nice_ticks(11) == [0, 5, 10, 15] and nice_ticks(1) == [0, 1]
    assert nice_ticks(3) == [0, 1, 2, 3] and nice_ticks(37) == [0, 10, 20, 30, 40] and nice_ticks(0) == [0, 1]
    assert nice_ticks(100) == [0, 50, 100] and nice_ticks(1234) == [0, 500, 1000, 1500]


def test_every_tile_links_to_the_runs_it_counts(admin_client: Any, seeded: Any) -> None:
    WorkflowRun.objects.create(  # retrying: parked with the failure it backs off after
        workflow_name="charge", status="running", input={}, available_at=seeded + timedelta(minutes=5), error={"a": 1}
    )
    page = admin_client.get(URL)
    context, html = page.context, page.content.decode()

    def listed(url: str) -> int:
        assert f'href="{escape(url)}"' in html, url
        response = admin_client.get(url)
        assert response.status_code == 200 and not messages_of(response), url
        return int(response.context["cl"].result_count)

    assert listed(context["finished_url"]) == context["total_finished"] == 13
    for outcome, _, count, url in context["finished"]:
        assert listed(url) == count, outcome
    assert listed(context["failed_url"]) == 2
    assert listed(context["in_flight_url"]) == context["data"].in_flight == 1
    assert listed(context["due_url"]) == context["due_total"] == 3
    assert listed(context["retrying_url"]) == context["retrying_now"] == 1
    assert listed(context["waiting_url"]) == context["waiting_now"] == 0
    (queue, due, _, url) = context["queues"][0]
    assert listed(url) == due == 3
    # Each bar links to the runs that finished in it, a run on a bar's edge in one bar only.
    WorkflowRun.objects.filter(status="canceled").update(finished_at=seeded.replace(second=0) - timedelta(minutes=64))
    html = admin_client.get(URL).content.decode()
    bars = [b.total for b in admin_client.get(URL).context["data"].buckets if b.total]
    links = re.findall(r'<a href="([^"]+)"><rect class="owf-chart-', html)
    assert bars == [1, 1, 11] and [listed(unescape(link)) for link in links] == bars


def test_any_number_of_hours_or_a_from_to_span(admin_client: Any, seeded: Any) -> None:
    page = admin_client.get(URL, {"hours": "4"})  # the run that finished 5 hours ago is out
    assert page.context["range"].hours == 4 and page.context["total_finished"] == 13
    assert page.context["data"].buckets[0].minutes == 2  # 240 minutes in at most 180 bars
    week = admin_client.get(URL, {"hours": "168"})
    assert week.context["total_finished"] == 14 and week.context["data"].buckets[0].minutes == 60
    since, until = seeded - timedelta(minutes=70), seeded - timedelta(minutes=60)
    span = admin_client.get(URL, {"from": since.isoformat(), "to": until.isoformat()})
    assert span.context["range_error"] == "" and span.context["total_finished"] == 2
    assert span.context["range"].hours is None and "last 3 hours" not in span.context["range"].label


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"hours": "-5; DROP"}, "is not a whole number of hours"),
        ({"hours": "100000"}, "must be from 1 to 2232 hours"),
        ({"from": "2026-13-01"}, "is not a date and time"),
        ({"from": "2026-11-20T10:00", "to": "soon"}, "To 'soon' is not a date and time"),
        ({"from": "2026-11-20T10:00", "to": "2026-11-20T10:00"}, "must start before it ends"),
    ],
)
def test_a_bad_range_is_said_never_a_500(admin_client: Any, params: dict[str, str], message: str) -> None:
    response = admin_client.get(URL, params)
    assert response.status_code == 200 and message in response.context["range_error"]
    assert response.context["hours"] == 3 and message in unescape(response.content.decode())


def test_chart_text_is_html_not_svg_text(admin_client: Any, seeded: Any) -> None:
    """Text inside a scaled SVG shrinks with it (6 px on a phone); the charts write theirs outside."""
    html = admin_client.get(URL).content.decode()
    assert "<text" not in html and 'preserveAspectRatio="none"' in html
    labels = re.findall(r'<span style="bottom: [\d.]+%">(\d+)</span>', html)
    assert labels == ["0", "5", "10", "15"]  # the busiest minute had 11 runs


def test_a_run_that_finished_earlier_this_second_is_counted_on_the_dashboard_and_the_workflow_page(
    monkeypatch: Any,
) -> None:
    """The pages end their range at now, given to the second: rounded up, not down, so such a run is in."""
    from django_openworkflow.admin.dashboard import dashboard_context
    from django_openworkflow.admin.workflow_page import workflow_context

    backend = get_backend()
    second = backend.now().replace(microsecond=0) - timedelta(minutes=1)
    finished("charge", "failed", timedelta(0), timedelta(seconds=1), second + timedelta(milliseconds=300))
    # The pages read the clock 0.6 s into that second (the database's clock, held still for the test).
    monkeypatch.setattr(backend, "now", lambda: second + timedelta(milliseconds=600))
    page = dashboard_context({"hours": "1"})
    assert page["total_finished"] == 1 and page["data"].finished["failed"] == 1
    figures = workflow_context("charge", {"hours": "1"}, can_start=False)["figures"]
    assert figures.finished["failed"] == 1 and figures.by_status["failed"] == 1
