"""Runs of a schedule on demand: backfilling past ticks, triggering a run now, and ``ctx.scheduled_at``.

The admin's, the CLI's and the API's faces of these are tested beside
those faces (tests/admin/test_schedules.py, tests/cli/test_schedules.py,
tests/api/test_schedules.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from django_openworkflow import backfill_schedule, trigger_schedule, workflow
from django_openworkflow.client.schedules import BACKFILL_LIMIT
from django_openworkflow.definitions.cron import scheduled_time
from django_openworkflow.definitions.flow import Schedule
from django_openworkflow.definitions.registry import registry
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.testing import drain
from django_openworkflow.worker.schedules import fire_due_schedules, sync_schedules, tick_key

MINUTELY = "backfill-minutely"
PARIS = "backfill-paris"
SECONDLY = "backfill-secondly"
DAY = datetime(2026, 1, 1, tzinfo=UTC)


def minutes(*offsets: int) -> list[str]:
    return [tick_key(DAY + timedelta(minutes=offset)) for offset in offsets]


def keys(name: str) -> list[str]:
    return sorted(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", flat=True))


@pytest.fixture
def scheduled() -> Iterator[list[Any]]:
    @workflow(name=MINUTELY, schedule=Schedule("* * * * *", timezone="UTC", input={"report": "daily"}))
    def minutely(ctx):
        tick = ctx.scheduled_at
        return {"tick": tick and tick.isoformat(), "input": ctx.input}

    @workflow(name=PARIS, schedule=Schedule("0 2 * * *", timezone="Europe/Paris", overlap="cancel_previous"))
    def paris(ctx):
        return None

    @workflow(name=SECONDLY, schedule=Schedule("* * * * * *", timezone="UTC"))
    def secondly(ctx):
        return None

    specs = [minutely, paris, secondly]
    yield specs
    for spec in specs:
        registry.unregister(spec.name, spec.version)


@pytest.mark.django_db
def test_backfill_starts_one_run_per_tick_with_the_ticks_key(scheduled):
    done = backfill_schedule(MINUTELY, DAY, DAY + timedelta(minutes=3))
    assert (done.ticks, done.created) == ([DAY + timedelta(minutes=n) for n in range(3)], 3)
    assert keys(MINUTELY) == minutes(0, 1, 2)  # the end is excluded
    assert (
        list(WorkflowRun.objects.filter(workflow_name=MINUTELY).values_list("input", flat=True))
        == [{"report": "daily"}] * 3
    )


@pytest.mark.django_db
def test_backfilling_again_or_over_ticks_already_run_starts_nothing_twice(scheduled):
    backfill_schedule(MINUTELY, DAY, DAY + timedelta(minutes=3))
    assert backfill_schedule(MINUTELY, DAY, DAY + timedelta(minutes=3)).created == 0
    # A live tick ran 00:05 (a worker fired it then): the backfill over it starts the others only.
    sync_schedules(now=DAY + timedelta(minutes=4, seconds=30))
    fire_due_schedules(now=DAY + timedelta(minutes=5, seconds=1))
    assert keys(MINUTELY) == minutes(0, 1, 2, 5)
    overlap = backfill_schedule(MINUTELY, DAY + timedelta(minutes=2), DAY + timedelta(minutes=7))
    assert (len(overlap.ticks), overlap.created) == (5, 3)
    assert keys(MINUTELY) == minutes(0, 1, 2, 3, 4, 5, 6)


@pytest.mark.django_db
def test_backfill_reads_naive_times_and_text_in_the_schedules_zone(scheduled):
    done = backfill_schedule(PARIS, datetime(2026, 1, 10), "2026-01-12T00:00:00")
    # 02:00 in Paris is 01:00 UTC in winter; cancel_previous does not apply to a backfill.
    assert done.ticks == [datetime(2026, 1, 10, 1, tzinfo=UTC), datetime(2026, 1, 11, 1, tzinfo=UTC)]
    assert list(WorkflowRun.objects.filter(workflow_name=PARIS).values_list("status", flat=True)) == ["pending"] * 2


@pytest.mark.django_db
def test_backfill_leaves_the_ticks_to_come_to_the_schedule(scheduled):
    now = get_backend().now()
    done = backfill_schedule(MINUTELY, now - timedelta(minutes=2), now + timedelta(hours=1))
    assert 2 <= len(done.ticks) <= 3 and all(tick <= get_backend().now() for tick in done.ticks)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("name", "start", "end", "says"),
    [
        ("nope", DAY, DAY + timedelta(minutes=1), "no workflow named 'nope' declares a schedule"),
        (MINUTELY, DAY, DAY, "start (2026-01-01T00:00:00+00:00) must be before end"),
        (MINUTELY, "yesterday", DAY, "start must be an ISO 8601 date and time, got 'yesterday'"),
        (MINUTELY, DAY, 42, "end must be a datetime, got 42"),
        # Converting these to UTC would overflow: refused before, not a traceback.
        (MINUTELY, "0001-01-01T00:00:00", DAY, "start must be between the years 1900 and 9998, got 0001-01-01"),
        (MINUTELY, DAY, "9999-12-31T23:59:59-01:00", "end must be between the years 1900 and 9998, got 9999-12-31"),
        (SECONDLY, DAY, DAY + timedelta(hours=3), f"holds more than {BACKFILL_LIMIT} ticks"),
    ],
)
def test_a_bad_backfill_says_what_is_wrong_and_starts_nothing(scheduled, name, start, end, says):
    with pytest.raises(InvalidArgument, match=says.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")):
        backfill_schedule(name, start, end)
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db
def test_the_largest_backfill_is_allowed(scheduled):
    # BACKFILL_LIMIT seconds of a schedule that ticks every second: exactly the limit.
    done = backfill_schedule(SECONDLY, DAY, DAY + timedelta(seconds=BACKFILL_LIMIT))
    assert done.created == BACKFILL_LIMIT == WorkflowRun.objects.filter(workflow_name=SECONDLY).count()


@pytest.mark.django_db
def test_trigger_now_starts_a_run_whose_key_no_tick_has(scheduled):
    before = get_backend().now()
    first, second = trigger_schedule(MINUTELY), trigger_schedule(scheduled[0])  # a name or the workflow
    assert first.created and second.created and first.id != second.id
    triggered = keys(MINUTELY)
    assert all(key.startswith("schedule:now:") for key in triggered)
    moments = [scheduled_time(key) for key in triggered]
    assert all(moment is not None and before <= moment <= get_backend().now() for moment in moments)


@pytest.mark.django_db
def test_a_run_reads_its_tick_as_ctx_scheduled_at(scheduled):
    backfill_schedule(MINUTELY, DAY, DAY + timedelta(minutes=1))
    trigger = trigger_schedule(MINUTELY)
    plain = scheduled[0].run()
    drain()
    tick = WorkflowRun.objects.get(idempotency_key=tick_key(DAY))
    assert tick.output == {"tick": DAY.isoformat(), "input": {"report": "daily"}}
    triggered_at = scheduled_time(trigger.fetch().idempotency_key)
    assert triggered_at is not None and trigger.result()["tick"] == triggered_at.isoformat()
    assert plain.result() == {"tick": None, "input": None}  # not started by the schedule


def test_scheduled_time_reads_only_a_schedules_keys():
    assert scheduled_time(tick_key(DAY)) == DAY
    assert scheduled_time("schedule:now:2026-01-01T00:00:00+00:00/abc") == DAY
    assert [scheduled_time(key) for key in (None, "order-42", "schedule:soon", "schedule:2026-01-01T00:00")] == [
        None
    ] * 4
