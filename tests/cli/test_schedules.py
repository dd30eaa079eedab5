"""``manage.py workflows schedules`` and ``schedule trigger|backfill NAME``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import CommandError

from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import WorkflowRun
from django_openworkflow.worker.schedules import sync_schedules
from tests.cli.helpers import as_json, workflows
from tests.fixtures import schedule_workflows
from tests.fixtures.schedule_workflows import EVERY_MINUTE, PARIS

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled() -> Iterator[list[Any]]:
    specs = schedule_workflows.declare()
    yield specs
    for spec in specs:
        registry.unregister(spec.name, spec.version)


def keys(name: str) -> list[str]:
    return sorted(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", flat=True))


def test_schedules_lists_the_declared_ones(scheduled):
    assert "no worker yet" in workflows("schedules")
    sync_schedules()
    listed = {item["name"]: item for item in as_json("schedules")}
    assert set(listed) == {spec.name for spec in scheduled}
    assert (listed[PARIS]["cron"], listed[PARIS]["timezone"], listed[PARIS]["overlap"]) == (
        "0 2 * * *", "Europe/Paris", "allow_all",
    )  # fmt: skip
    assert listed[PARIS]["next_tick_at"] is not None and not listed[PARIS]["paused"]


def test_schedule_trigger_starts_a_run_now(scheduled):
    said = workflows("schedule", "trigger", EVERY_MINUTE)
    [key] = keys(EVERY_MINUTE)
    assert key.startswith("schedule:now:") and f"Started run {WorkflowRun.objects.get().id}" in said
    assert as_json("schedule", "trigger", EVERY_MINUTE)["run"] != str(WorkflowRun.objects.get(idempotency_key=key).id)


def test_schedule_backfill_is_idempotent(scheduled):
    args = ("schedule", "backfill", PARIS, "--start", "2026-01-10T00:00", "--end", "2026-01-12T00:00")
    assert "Backfilled 2 tick(s) of 'sched-paris': 2 new run(s), 0 had one already." in workflows(*args)
    assert keys(PARIS) == ["schedule:2026-01-10T01:00:00+00:00", "schedule:2026-01-11T01:00:00+00:00"]
    again = as_json(*args)
    assert (again["ticks"], again["created"], again["first_tick"]) == (2, 0, "2026-01-10T01:00:00+00:00")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("trigger", "nope"), "no workflow named 'nope' declares a schedule in this process"),
        (("backfill", PARIS, "--start", "soon", "--end", "2026-01-01"), "start must be an ISO 8601 date and time"),
        (("backfill", EVERY_MINUTE, "--start", "2000-01-01", "--end", "2026-01-01"), "more than 10000 ticks"),
    ],
)
def test_a_bad_schedule_command_says_what_is_wrong(scheduled, args, says):
    with pytest.raises(CommandError, match=says):
        workflows("schedule", *args)
    assert not WorkflowRun.objects.exists()
