"""The admin's dashboard: its figures from known runs (store/dashboard.py), its page, who may see it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import dashboard, get_backend

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
