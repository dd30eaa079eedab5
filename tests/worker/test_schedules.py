"""Cron schedules: bad declarations, one run per tick from many workers, missed ticks, DST, a real clock.

The schedules' admin (pause, resume) is tested in tests/admin/test_schedules.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection

from django_openworkflow import WorkflowRegistrationError, workflow
from django_openworkflow.client.schedules import next_ticks
from django_openworkflow.definitions.flow import Schedule
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import Schedule as ScheduleRow
from django_openworkflow.models import WorkflowRun
from django_openworkflow.worker.schedules import (
    Scheduler,
    fire_due_schedules,
    latest_tick,
    sync_schedules,
    tick_key,
    ticks_after,
)
from tests.conftest import CEILING, ROOT, race, wait_until
from tests.fixtures import schedule_workflows
from tests.fixtures.schedule_workflows import EVERY_MINUTE, EVERY_TWO_SECONDS, EVERY_TWO_SECONDS_CRON, PARIS, SKIPPING

BASE = datetime(2030, 1, 7, 10, 0, 30, tzinfo=UTC)  # half a minute past a tick


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def minute(n: int) -> str:
    """The tick key of BASE's n-th next minute."""
    return tick_key(BASE.replace(second=0) + timedelta(minutes=n))


def keys(name: str) -> list[str]:
    return sorted(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", flat=True))


@pytest.fixture
def scheduled() -> Iterator[list[Any]]:
    specs = schedule_workflows.declare()
    yield specs
    for spec in specs:
        registry.unregister(spec.name, spec.version)


# -- declaration --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *'"),
        ({"cron": "* * * *"}, "invalid cron expression '* * * *'"),
        ({"cron": "* * * * * * 2030"}, "invalid cron expression '* * * * * * 2030'"),
        ({"cron": "every day"}, "invalid cron expression 'every day'"),
        ({"cron": "0 0 31 2 *"}, "cron expression '0 0 31 2 *' never fires"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"cron": "* * * * *", "timezone": "../etc/passwd"}, "unknown time zone '../etc/passwd'"),
        ({"cron": "* * * * *", "missed": "all"}, "missed must be 'latest' or 'skip', got 'all'"),
        ({"cron": "* * * * *", "input": {"x": object()}}, "not JSON-serializable"),
    ],
)
def test_bad_schedules_fail_at_declaration(kwargs, says):
    bad = Schedule(**kwargs)  # keeps its error: @workflow raises it with the workflow's name
    with pytest.raises(WorkflowRegistrationError, match=None) as caught:
        bad.check()
    assert says in str(caught.value)
    with pytest.raises(WorkflowRegistrationError, match=None) as caught:
        workflow(name="sched-bad-object", schedule=bad)(lambda ctx: None)
    assert str(caught.value).startswith("workflow 'sched-bad-object': ")
    assert says in str(caught.value)


def test_bad_cron_string_fails_the_workflow_declaration():
    with pytest.raises(WorkflowRegistrationError, match="invalid cron expression 'often'"):

        @workflow(name="sched-bad", schedule="often")
        def bad(ctx):
            return None

    assert registry.get("sched-bad", None) is None


def test_without_croniter_a_schedule_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "croniter", None)  # import croniter now raises ImportError
    with pytest.raises(WorkflowRegistrationError, match=r"pip install 'django-openworkflow\[cron\]'"):
        Schedule("* * * * *").check()


def test_without_croniter_the_package_imports_and_workers_run():
    script = (
        "import sys; sys.modules['croniter'] = None\n"
        "import django; django.setup()\n"
        "import django_openworkflow.admin, django_openworkflow.worker, django_openworkflow.dispatch.sweeper\n"
        "from django_openworkflow.worker.schedules import Scheduler\n"
        "print(Scheduler().tick())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings"),
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"


@pytest.mark.django_db
def test_no_schedule_declared_costs_no_query(django_assert_num_queries):
    with django_assert_num_queries(0):
        assert Scheduler().tick() == 0


# -- tick arithmetic ------------------------------------------------------------


def test_six_fields_put_the_seconds_last():
    ticks = ticks_after(EVERY_TWO_SECONDS_CRON, "UTC", BASE)
    assert [next(ticks) for _ in range(3)] == [at(2), at(4), at(6)]


def test_daily_tick_across_the_march_dst_change():
    # Paris: 2024-03-31 02:00 does not exist (clocks go from 02:00 CET to 03:00 CEST).
    ticks = next_ticks(Schedule("0 2 * * *", timezone="Europe/Paris"), 3, now=datetime(2024, 3, 29, 12, tzinfo=UTC))
    assert ticks == [
        datetime(2024, 3, 30, 1, 0, tzinfo=UTC),  # 02:00 CET
        datetime(2024, 3, 31, 1, 0, tzinfo=UTC),  # 03:00 CEST: the first moment after the missing 02:00
        datetime(2024, 4, 1, 0, 0, tzinfo=UTC),  # 02:00 CEST
    ]
    assert latest_tick("0 2 * * *", "Europe/Paris", datetime(2024, 3, 31, 1, 30, tzinfo=UTC)) == ticks[1]


def test_october_dst_change_fires_a_fixed_hour_once_and_each_real_hour():
    october = datetime(2024, 10, 26, 12, tzinfo=UTC)
    daily = next_ticks(Schedule("30 2 * * *", timezone="Europe/Paris"), 2, now=october)
    assert daily == [datetime(2024, 10, 27, 0, 30, tzinfo=UTC), datetime(2024, 10, 28, 1, 30, tzinfo=UTC)]
    hourly = next_ticks(Schedule("0 * * * *", timezone="Europe/Paris"), 14, now=october)
    assert hourly[-3:] == [datetime(2024, 10, 27, hour, tzinfo=UTC) for hour in (0, 1, 2)]  # 02:00 twice, 03:00
    assert latest_tick("30 2 * * *", "Europe/Paris", datetime(2024, 10, 27, 1, 45, tzinfo=UTC)) == daily[0]


# -- firing: one run per tick, missed ticks ---------------------------------------


@pytest.mark.django_db
def test_three_workers_for_three_minutes_start_one_run_per_minute(scheduled):
    sync_schedules(now=BASE)
    created = 0
    for second in range(180):
        for worker in range(3):  # three workers, each looking once a second, a third of a second apart
            created += fire_due_schedules(now=at(second + worker / 3))
    assert keys(EVERY_MINUTE) == [minute(1), minute(2), minute(3)]
    assert created == 3 * 2  # and as many for the skipping schedule, which missed nothing
    assert (
        list(WorkflowRun.objects.filter(workflow_name=EVERY_MINUTE).values_list("input", flat=True))
        == [{"hello": "world"}] * 3
    )
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    assert (row.last_tick_at, row.next_tick_at) == (at(150), at(210))


@pytest.mark.django_db(transaction=True)
def test_workers_racing_for_one_tick_start_one_run(scheduled):
    sync_schedules(now=BASE)
    made = race(lambda: fire_due_schedules(now=at(31)), 3)
    assert keys(EVERY_MINUTE) == [minute(1)]
    assert sum(made) == 2  # EVERY_MINUTE's and SKIPPING's runs, each once
    assert ScheduleRow.objects.get(name=EVERY_MINUTE).next_tick_at == at(90)


@pytest.mark.django_db
def test_missed_latest_starts_one_run_for_the_latest_missed_tick(scheduled):
    sync_schedules(now=BASE)
    # Every worker down from before 10:01 to 10:05:40: five ticks passed.
    assert fire_due_schedules(now=at(310)) == 1  # only EVERY_MINUTE: SKIPPING skips
    assert keys(EVERY_MINUTE) == [minute(5)]
    assert fire_due_schedules(now=at(320)) == 0
    assert fire_due_schedules(now=at(331)) == 2
    assert keys(EVERY_MINUTE) == [minute(5), minute(6)]


@pytest.mark.django_db
def test_missed_skip_starts_none_then_the_next_tick(scheduled):
    sync_schedules(now=BASE)
    fire_due_schedules(now=at(310))
    assert keys(SKIPPING) == []
    assert ScheduleRow.objects.get(name=SKIPPING).next_tick_at == at(330)
    fire_due_schedules(now=at(331))
    assert keys(SKIPPING) == [minute(6)]
    # A worker 30 s late (within MISSED_GRACE) has not missed the tick.
    fire_due_schedules(now=at(420))
    assert keys(SKIPPING) == [minute(6), minute(7)]


@pytest.mark.django_db
def test_a_new_schedule_starts_nothing_for_the_past(scheduled):
    sync_schedules(now=BASE)
    assert fire_due_schedules(now=at(29)) == 0
    row = ScheduleRow.objects.get(name=PARIS)
    assert (row.cron, row.timezone, row.missed, row.paused) == ("0 2 * * *", "Europe/Paris", "latest", False)
    assert (row.last_tick_at, row.next_tick_at) == (BASE, datetime(2030, 1, 8, 1, tzinfo=UTC))


@pytest.mark.django_db
def test_the_daily_paris_schedule_fires_at_03_00_on_the_march_change(scheduled):
    sync_schedules(now=datetime(2024, 3, 30, 12, tzinfo=UTC))
    fire_due_schedules(now=datetime(2024, 3, 31, 0, 59, tzinfo=UTC))
    assert keys(PARIS) == []
    fire_due_schedules(now=datetime(2024, 3, 31, 1, 0, 1, tzinfo=UTC))
    assert keys(PARIS) == ["schedule:2024-03-31T01:00:00+00:00"]


@pytest.mark.django_db
def test_a_schedule_changed_in_code_is_updated_and_keeps_its_pause(scheduled):
    sync_schedules(now=BASE)
    ScheduleRow.objects.filter(name=EVERY_MINUTE).update(paused=True)

    @workflow(name=EVERY_MINUTE, version="v2", schedule=Schedule("*/5 * * * *", timezone="UTC", missed="skip"))
    def every_five_minutes(ctx):
        return None

    try:
        sync_schedules(now=at(60))
    finally:
        registry.unregister(EVERY_MINUTE, "v2")
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    assert (row.cron, row.missed, row.input, row.paused) == ("*/5 * * * *", "skip", None, True)
    assert row.next_tick_at == datetime(2030, 1, 7, 10, 5, tzinfo=UTC)


@pytest.mark.django_db
def test_paused_and_undeclared_schedules_start_nothing(scheduled):
    sync_schedules(now=BASE)
    ScheduleRow.objects.filter(name=EVERY_MINUTE).update(paused=True)
    ScheduleRow.objects.create(name="no-longer-declared", cron="* * * * *", timezone="UTC", next_tick_at=BASE)
    fire_due_schedules(now=at(200))
    assert keys(EVERY_MINUTE) == [] and keys("no-longer-declared") == []
    assert keys(SKIPPING) == []  # missed: more than a minute late


@pytest.mark.django_db
def test_scheduler_looks_at_most_once_per_interval(scheduled, django_assert_num_queries):
    clock = [100.0]
    scheduler = Scheduler(clock=lambda: clock[0])
    scheduler.tick()
    assert ScheduleRow.objects.count() == 3  # synced on first use
    with django_assert_num_queries(0):
        clock[0] = 100.9
        assert scheduler.tick() == 0


# -- a real clock, real worker processes --------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_three_worker_processes_start_one_run_per_two_second_tick():
    env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.fixtures.schedule_workflows", "--poll", "50ms"], cwd=ROOT, env=env
        )
        for _ in range(3)
    ]
    try:
        wait_until(lambda: ScheduleRow.objects.filter(name=EVERY_TWO_SECONDS).exists(), timeout=CEILING, interval=0.01)
        # When the first worker created the row: no tick before this one fires.
        began = ScheduleRow.objects.get(name=EVERY_TWO_SECONDS).last_tick_at
        # Every tick of the next six seconds fires: waited for, however slow the machine (a tick
        # skipped for good never fires, and the wait fails).
        wanted = set(ticks_between(began, began + timedelta(seconds=6)))
        wait_until(lambda: wanted <= set(fired_ticks()), timeout=CEILING, interval=0.1)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            if proc.wait(20) != 0:
                pytest.fail("a worker did not stop cleanly")
    ticks = fired_ticks()
    assert len(ticks) == len(set(ticks)) >= 3
    # No gap: each fired tick is the one after the previous.
    assert [next(ticks_after(EVERY_TWO_SECONDS_CRON, "UTC", tick)) for tick in ticks[:-1]] == ticks[1:]
    # The first tick after the row began is the first fired (unless fired before `began` was read) ...
    assert ticks[0] in (began, next(ticks_after(EVERY_TWO_SECONDS_CRON, "UTC", began)))
    assert wanted <= set(ticks)


def fired_ticks() -> list[datetime]:
    """The ticks the every-two-seconds schedule started a run for, in order (one per run: keys are unique)."""
    keys = WorkflowRun.objects.filter(workflow_name=EVERY_TWO_SECONDS).values_list("idempotency_key", flat=True)
    return sorted(datetime.fromisoformat(key.removeprefix("schedule:")) for key in keys)


def ticks_between(start: datetime, end: datetime) -> Iterator[datetime]:
    for tick in ticks_after(EVERY_TWO_SECONDS_CRON, "UTC", start):
        if tick > end:
            return
        yield tick
