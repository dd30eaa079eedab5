"""The run page's timeline (admin/timeline.py): bars for waits and sleeps, a run without steps."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow.admin.journal import journal_rows
from django_openworkflow.admin.timeline import build_timeline
from tests.admin.helpers import make_attempt, make_run, run_url


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
def test_waits_are_hatched_bars(admin_client: Any) -> None:
    run = make_run(status="running")
    make_attempt(run, "child", kind="workflow", status="completed", output={"ok": 1})
    make_attempt(run, "approval", kind="signal", status="failed", error={"type": "Timeout", "message": "no signal"})
    make_attempt(run, "paid", kind="event", status="running", finished_at=None)
    rows = admin_client.get(run_url(run)).context["timeline"].rows
    assert [row.bars[0].css for row in rows] == ["owf-bar-wait", "owf-bar-failed owf-bar-wait", "owf-bar-wait"]


@pytest.mark.django_db
def test_timeline_of_a_run_without_steps_is_none() -> None:
    run = make_run()
    assert build_timeline(run, journal_rows([], timezone.now()), timezone.now()) is None
