"""Schedules' overlap policies: what a tick does while a run of its schedule is unfinished.

The policies' decisions, tick by tick, with the clock passed in; then real
worker processes on the real clock: two workers, one run per tick, and
the policy holding between the runs they execute.
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
from django_openworkflow.definitions.flow import Schedule
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import Schedule as ScheduleRow
from django_openworkflow.models import WorkflowRun
from django_openworkflow.states import RunStatus
from django_openworkflow.worker.schedules import fire_due_schedules, sync_schedules, tick_key
from tests.conftest import CEILING, ROOT, race, wait_until
from tests.fixtures.schedule_workflows import BUFFER_ONE, CANCEL_PREVIOUS, REAL_CLOCK, SKIP_OVERLAP, SLOW_RUN_SECONDS

BASE = datetime(2030, 1, 7, 10, 0, 30, tzinfo=UTC)  # half a minute past a tick


def at(seconds: float) -> datetime:
    return BASE + timedelta(seconds=seconds)


def minute(n: int) -> str:
    """The tick key of BASE's n-th next minute."""
    return tick_key(BASE.replace(second=0) + timedelta(minutes=n))


def runs(name: str) -> dict[str, str]:
    """Each run's status by its key."""
    return dict(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", "status"))


def finish(name: str) -> None:
    WorkflowRun.objects.filter(workflow_name=name).update(status=RunStatus.COMPLETED)


POLICIES = ("allow_all", "skip", "buffer_one", "cancel_previous")


@pytest.fixture
def policies() -> Iterator[dict[str, Any]]:
    """One every-minute schedule per overlap policy, named after it."""
    specs = {}
    for policy in POLICIES:

        @workflow(name=f"overlap-{policy}", schedule=Schedule("* * * * *", timezone="UTC", overlap=policy))
        def each(ctx):
            return None

        specs[policy] = each
    sync_schedules(now=BASE)
    yield specs
    for spec in specs.values():
        registry.unregister(spec.name, spec.version)


def test_a_bad_overlap_fails_at_declaration():
    with pytest.raises(WorkflowRegistrationError, match="overlap must be one of 'allow_all', 'skip', 'buffer_one'"):

        @workflow(name="bad-overlap", schedule=Schedule("* * * * *", overlap="queue"))
        def bad(ctx):
            return None


@pytest.mark.django_db
def test_allow_all_is_the_default_and_starts_every_tick(policies):
    assert Schedule("* * * * *").overlap == "allow_all"
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))
    assert runs("overlap-allow_all") == {minute(1): "pending", minute(2): "pending"}
    assert ScheduleRow.objects.get(name="overlap-allow_all").overlap == "allow_all"


@pytest.mark.django_db
def test_skip_starts_no_run_while_one_is_unfinished(policies):
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))  # the first run is still pending
    assert runs("overlap-skip") == {minute(1): "pending"}
    assert ScheduleRow.objects.get(name="overlap-skip").next_tick_at == at(150)
    finish("overlap-skip")
    fire_due_schedules(now=at(151))
    assert runs("overlap-skip") == {minute(1): "completed", minute(3): "pending"}


@pytest.mark.django_db
def test_skip_does_not_count_the_ticks_own_run_as_a_previous_one(policies):
    # A worker started the tick's run and died before moving the row on: the tick is still due.
    fire_due_schedules(now=at(31))
    ScheduleRow.objects.filter(name="overlap-skip").update(next_tick_at=at(30))
    assert fire_due_schedules(now=at(32)) == 0
    assert runs("overlap-skip") == {minute(1): "pending"}
    assert ScheduleRow.objects.get(name="overlap-skip").next_tick_at == at(90)


@pytest.mark.django_db
def test_buffer_one_keeps_one_tick_and_starts_it_when_the_run_ends(policies):
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))  # buffered
    fire_due_schedules(now=at(151))  # dropped: one tick is buffered already
    row = ScheduleRow.objects.get(name="overlap-buffer_one")
    assert row.buffered_tick_at == BASE.replace(second=0) + timedelta(minutes=2)
    assert runs("overlap-buffer_one") == {minute(1): "pending"}
    fire_due_schedules(now=at(152))
    assert runs("overlap-buffer_one") == {minute(1): "pending"}
    finish("overlap-buffer_one")
    # Any process's next look starts it: the buffer is in the database, not in a worker.
    assert fire_due_schedules(now=at(153)) == 1
    assert runs("overlap-buffer_one") == {minute(1): "completed", minute(2): "pending"}
    assert ScheduleRow.objects.get(name="overlap-buffer_one").buffered_tick_at is None


@pytest.mark.django_db(transaction=True)
def test_workers_racing_for_a_buffered_tick_start_one_run(policies):
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))
    finish("overlap-buffer_one")
    made = race(lambda: fire_due_schedules(now=at(100)), 3)
    assert sum(made) == 1
    assert runs("overlap-buffer_one") == {minute(1): "completed", minute(2): "pending"}


@pytest.mark.django_db
def test_a_paused_schedule_keeps_its_buffered_tick_until_resumed(policies):
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))
    finish("overlap-buffer_one")
    ScheduleRow.objects.filter(name="overlap-buffer_one").update(paused=True)
    fire_due_schedules(now=at(100))
    assert runs("overlap-buffer_one") == {minute(1): "completed"}
    ScheduleRow.objects.filter(name="overlap-buffer_one").update(paused=False)
    fire_due_schedules(now=at(101))
    assert runs("overlap-buffer_one") == {minute(1): "completed", minute(2): "pending"}


@pytest.mark.django_db
def test_cancel_previous_cancels_the_unfinished_runs_and_starts_its_own(policies):
    fire_due_schedules(now=at(31))
    fire_due_schedules(now=at(91))
    assert runs("overlap-cancel_previous") == {minute(1): "canceled", minute(2): "pending"}
    fire_due_schedules(now=at(92))  # nothing due: nothing canceled
    assert runs("overlap-cancel_previous") == {minute(1): "canceled", minute(2): "pending"}


# -- real worker processes on the real clock ----------------------------------------


def start_workers(schedules: str, count: int = 2) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]), OWF_TEST_SCHEDULES=schedules)
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tests.fixtures.schedule_workflows", "--poll", "50ms"], cwd=ROOT, env=env
        )
        for _ in range(count)
    ]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
    for proc in procs:
        proc.wait(20)


def finished_runs(name: str) -> list[tuple[datetime, datetime, datetime]]:
    """(tick, created, finished) of each run that completed, in tick order."""
    rows = WorkflowRun.objects.filter(workflow_name=name, status=RunStatus.COMPLETED)
    found = [
        (datetime.fromisoformat(key.removeprefix("schedule:")), created, ended)
        for key, created, ended in rows.values_list("idempotency_key", "created_at", "finished_at")
    ]
    return sorted(found)


def watch(name: str, runs_wanted: int) -> list[tuple[datetime, datetime, datetime]]:
    procs = start_workers(name)
    try:
        wait_until(lambda: len(finished_runs(name)) >= runs_wanted, timeout=CEILING, interval=0.05)
    finally:
        stop(procs)
    keys = list(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", flat=True))
    assert len(keys) == len(set(keys))  # one run per tick, two workers firing
    return finished_runs(name)


def assert_one_at_a_time(done: list[tuple[datetime, datetime, datetime]]) -> None:
    """Each run was created after the one before it had finished."""
    for (_, _, ended), (_, created, _) in zip(done, done[1:], strict=False):
        assert created >= ended


@pytest.mark.django_db(transaction=True)
def test_two_workers_skip_ticks_while_a_run_is_unfinished():
    done = watch(SKIP_OVERLAP, 2)
    assert_one_at_a_time(done)
    # A run lasts longer than a second: the tick after its own found it unfinished.
    assert all(later - earlier >= timedelta(seconds=2) for (earlier, *_), (later, *_) in zip(done, done[1:]))


@pytest.mark.django_db(transaction=True)
def test_two_workers_buffer_the_next_tick_and_start_it_when_the_run_ends():
    done = watch(BUFFER_ONE, 2)
    assert_one_at_a_time(done)
    # The second run is the tick right after the first's: it came while the first ran, waited, then started.
    # (The ticks that come while one waits are dropped: test_buffer_one_keeps_one_tick_and_starts_it_when_the_run_ends.)
    (first, *_), (second, created, _) = done[:2]
    assert second - first == timedelta(seconds=1)
    assert created - second >= timedelta(seconds=SLOW_RUN_SECONDS - 1)


@pytest.mark.django_db(transaction=True)
def test_a_buffered_tick_survives_every_worker_stopping():
    declared = REAL_CLOCK[BUFFER_ONE]()  # here as in the worker processes
    try:
        sync_schedules(now=BASE)
        fire_due_schedules(now=at(1))  # the run of 10:00:31, which no worker ran: every worker was down
        fire_due_schedules(now=at(2))  # 10:00:32's tick, buffered
    finally:
        registry.unregister(declared.name, declared.version)
    assert ScheduleRow.objects.get(name=BUFFER_ONE).buffered_tick_at == at(2)
    # A worker comes back (its clock is years before the next tick): it runs the first run, then the buffered one.
    procs = start_workers(BUFFER_ONE, count=1)
    try:
        wait_until(lambda: runs(BUFFER_ONE).get(tick_key(at(2))) == "completed", timeout=CEILING, interval=0.05)
    finally:
        stop(procs)
    first, second = (WorkflowRun.objects.get(workflow_name=BUFFER_ONE, idempotency_key=tick_key(at(n))) for n in (1, 2))
    assert first.status == RunStatus.COMPLETED and second.created_at >= first.finished_at
    assert second.output == at(2).isoformat()  # what the run read as ctx.scheduled_at
    assert ScheduleRow.objects.get(name=BUFFER_ONE).buffered_tick_at is None


@pytest.mark.django_db(transaction=True)
def test_two_workers_cancel_the_previous_run_at_each_tick():
    procs = start_workers(CANCEL_PREVIOUS)
    try:
        wait_until(
            lambda: WorkflowRun.objects.filter(workflow_name=CANCEL_PREVIOUS, status=RunStatus.CANCELED).count() >= 2,
            timeout=CEILING,
            interval=0.05,
        )
    finally:
        stop(procs)
    found = sorted(
        WorkflowRun.objects.filter(workflow_name=CANCEL_PREVIOUS).values_list("idempotency_key", "status", "created_at")
    )
    assert len({key for key, *_ in found}) == len(found)
    # Every run but the newest was canceled by the tick after it (none completed: each waits to be canceled).
    assert [status for _, status, _ in found[:-1]] == [RunStatus.CANCELED] * (len(found) - 1)
    assert found[-1][1] in (RunStatus.PENDING, RunStatus.RUNNING)
