"""The run list's free time range filters (admin/date_range.py): created or finished from one moment to another."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_openworkflow.admin.time_range import bar_minutes, parse_moment
from django_openworkflow.models import WorkflowRun
from tests.admin.helpers import LIST_URL, make_run, messages_of

pytestmark = pytest.mark.django_db

UTC = ZoneInfo("UTC")
DAY = datetime(2026, 11, 20, tzinfo=UTC)


@pytest.fixture
def runs() -> dict[str, Any]:
    """Runs created at 08:00, 12:00 and 23:30 on 2026-11-20, and one the day after; two of them finished."""
    made = {}
    for label, created in (("8", 8), ("12", 12), ("23", 23.5), ("next", 33)):
        at = DAY + timedelta(hours=created)
        made[label] = make_run(available_at=at)
        WorkflowRun.objects.filter(id=made[label].id).update(created_at=at)  # auto_now_add
    WorkflowRun.objects.filter(id=made["8"].id).update(status="completed", finished_at=DAY + timedelta(hours=9))
    WorkflowRun.objects.filter(id=made["12"].id).update(status="failed", finished_at=DAY + timedelta(hours=30))
    return made


def shown(admin_client: Any, **params: str) -> tuple[set[str], list[str]]:
    response = admin_client.get(LIST_URL, params)
    assert response.status_code == 200
    return {str(run.id) for run in response.context["cl"].result_list}, messages_of(response)


def ids(runs: dict[str, Any], *labels: str) -> set[str]:
    return {str(runs[label].id) for label in labels}


@override_settings(TIME_ZONE="UTC")
def test_created_and_finished_ranges(admin_client: Any, runs: dict[str, Any]) -> None:
    assert shown(admin_client, created_from="2026-11-20T10:00", created_to="2026-11-20T23:59") == (
        ids(runs, "12", "23"),
        [],
    )
    # A date alone as "to" means the whole of that day; either end may be left out.
    assert shown(admin_client, created_to="2026-11-20")[0] == ids(runs, "8", "12", "23")
    assert shown(admin_client, created_from="2026-11-21")[0] == ids(runs, "next")
    assert shown(admin_client, finished_from="2026-11-21T00:00")[0] == ids(runs, "12")
    # With an offset (the dashboard's links): 10:00+02:00 is 08:00 UTC, both ends included.
    assert shown(admin_client, created_from="2026-11-20T10:00:00+02:00", created_to="2026-11-20T12:00:00Z")[0] == ids(
        runs, "8", "12"
    )
    # Combined with the other filters, which the form keeps as hidden inputs.
    html = admin_client.get(LIST_URL, {"status": "failed", "finished_from": "2026-11-20"}).content.decode()
    assert '<input type="hidden" name="status" value="failed">' in html
    assert 'name="finished_from" value="2026-11-20T00:00:00"' in html


@override_settings(TIME_ZONE="Europe/Paris")
def test_a_moment_without_an_offset_is_local_time(admin_client: Any, runs: dict[str, Any]) -> None:
    # 09:00 in Paris is 08:00 UTC: the 08:00 UTC run is included.
    assert shown(admin_client, created_from="2026-11-20T09:00", created_to="2026-11-20T09:00")[0] == ids(runs, "8")


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"created_from": "last tuesday"}, "created between from 'last tuesday' is not a date and time"),
        ({"finished_to": "2026-02-30"}, "finished between to '2026-02-30' is not a date and time"),
        ({"created_from": "2026-11-21", "created_to": "2026-11-20T12:00"}, "ends before it starts"),
        ({"created_from": "99999-01-01"}, "is not a date and time"),
        ({"created_from": "\x00"}, "is not a date and time"),
    ],
)
def test_a_bad_bound_is_said_once_and_left_out(
    admin_client: Any, runs: dict[str, Any], params: dict[str, str], message: str
) -> None:
    found, said = shown(admin_client, **params)
    assert found == ids(runs, "8", "12", "23", "next")  # the bad bound filters nothing
    assert len(said) == 1 and message in said[0]


def test_parse_moment_and_bar_widths() -> None:
    assert parse_moment("2026-11-20T08:00:00+02:00") == datetime(2026, 11, 20, 6, tzinfo=UTC)
    assert (
        parse_moment("2026-11-20") is not None and parse_moment("") is None and parse_moment("0001-01-01") is not None
    )
    assert [bar_minutes(timedelta(hours=h)) for h in (1, 3, 6, 24, 168, 2232)] == [1, 1, 2, 10, 60, 1440]
