"""Cron schedules: a run at each tick of a workflow's ``schedule``, exactly once whatever the number of workers.

There is no leader. Every worker (and the Celery sweep) looks for due
schedules about once a second and starts the run of a tick with the tick's
time in its idempotency key, ``schedule:<tick in UTC, ISO 8601>``: two
workers that see the same tick insert one run, because the database's
unique key decides. The row's ``next_tick_at`` then moves on with a
compare-and-set, so workers never undo each other's progress.

Ticks are computed in the schedule's time zone and stored in UTC. Across a
DST change a tick that falls in the skipped hour runs at the first moment
after it (croniter's behaviour, and cron's); in the repeated hour an
expression with a fixed hour (``30 2 * * *``) fires once, on the first pass,
while one with a ``*`` hour (``0 * * * *``) fires on each real hour.

Missed ticks (the policy is ``Schedule.missed``). At each look the *due*
ticks of a schedule are those from its ``next_tick_at`` up to now, and at
most one run starts: for the latest due tick, never for the ones before
it. A due tick is *missed* when it is more than :data:`MISSED_GRACE` old
(no worker looked in time: they were all down, or stuck).

- ``"latest"``: the latest due tick's run starts, missed or not. Workers
  down for five ticks start one run when they come back, for the fifth.
- ``"skip"``: if the earliest due tick is missed, no run starts and the
  schedule waits for the next tick; a worker a few seconds late still
  starts the run.

A schedule seen for the first time starts nothing for the past: it begins
at its first tick after now. A paused schedule starts nothing; resuming it
starts at the first tick after the resume, whichever the policy (a pause is
a decision not to run, not an outage).

What a tick does while a run of its schedule is unfinished (``Schedule.overlap``:
start anyway, skip, buffer one, cancel the previous) is ``schedule_runs.py``'s;
backfilling past ticks, triggering a run now, the schedules' state and their
next ticks are an operator's, in ``client/schedules.py``. A ``buffer_one``
schedule's waiting tick is in its row (``buffered_tick_at``): each look
starts it once no run of the schedule is unfinished, before the due tick.

croniter is the optional extra ``[cron]``: it is imported only in here, and
only when a workflow declares a schedule.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..client.schedules import declared_schedules
from ..definitions.cron import KEY_PREFIX, latest_tick, tick_key, ticks_after, zone_name
from .schedule_runs import TickOutcome, start_buffered, start_tick

if TYPE_CHECKING:
    from ..definitions.flow import Schedule
    from ..models import Schedule as ScheduleRow

logger = logging.getLogger("django_openworkflow.schedules")

MISSED_GRACE = timedelta(minutes=1)
"""A due tick older than this when a worker first sees it was missed (see ``missed="skip"``)."""

__all__ = [
    "KEY_PREFIX",
    "MISSED_GRACE",
    "Scheduler",
    "declared_schedules",
    "fire_due_schedules",
    "sync_schedules",
    "tick_key",
]


def _now() -> datetime:
    from ..store import get_backend

    return get_backend().now()


# -- the rows -------------------------------------------------------------------


def _declared_fields(schedule: Schedule) -> dict[str, Any]:
    from ..definitions.payload import to_json_value

    return {
        "cron": schedule.cron,
        "timezone": zone_name(schedule.timezone),
        "missed": schedule.missed,
        "overlap": schedule.overlap,
        "input": to_json_value(schedule.input, f"input of schedule {schedule.cron!r}", "input"),
    }


def sync_schedules(now: datetime | None = None) -> None:
    """Bring the rows in line with the schedules declared in code.

    A new row begins at ``now``: no run for ticks before it. A row whose
    cron, time zone, input or policy changed in code takes the new values
    and its next tick is recomputed from now; ``paused`` stays as the admin
    left it. Rows of workflows that no longer declare a schedule stay (with
    their pause state) but start nothing: only declared names fire.
    """
    from ..models import Schedule as ScheduleRow

    declared = declared_schedules()
    if not declared:
        return
    now = _now() if now is None else now
    for name, schedule in declared.items():
        fields = _declared_fields(schedule)
        first = next(ticks_after(fields["cron"], fields["timezone"], now))
        row, created = ScheduleRow.objects.get_or_create(
            name=name, defaults={**fields, "last_tick_at": now, "next_tick_at": first}
        )
        if created:
            continue
        if any(getattr(row, field) != value for field, value in fields.items()) or row.next_tick_at is None:
            ScheduleRow.objects.filter(pk=row.pk).update(**fields, next_tick_at=first)
            logger.info("schedule of %s changed in code: now %s %s", name, fields["cron"], fields["timezone"])


def fire_due_schedules(now: datetime | None = None) -> int:
    """Start the run of each due schedule's tick (see the module's policy); returns how many runs this call created.

    ``now`` defaults to the database clock, which every worker shares; tests
    pass their own. A schedule whose row cannot be worked out (a time zone
    this machine does not know) is logged and left for the others.
    """
    from django.db.models import Q

    from ..models import Schedule as ScheduleRow

    declared = declared_schedules()
    if not declared:
        return 0
    now = _now() if now is None else now
    created = 0
    due = ScheduleRow.objects.filter(
        Q(next_tick_at__lte=now) | Q(buffered_tick_at__isnull=False), paused=False, name__in=list(declared)
    )
    for row in due:
        try:
            # The buffered tick first: it is older than the due one, which may buffer itself in its place.
            created += start_buffered(row)
            if row.next_tick_at is not None and row.next_tick_at <= now:
                created += _fire(row, now)
        except (ValueError, KeyError, OSError) as exc:  # croniter's and zoneinfo's errors
            logger.error("schedule of %s (%r %s) cannot be computed: %s", row.name, row.cron, row.timezone, exc)
    return created


def _fire(row: ScheduleRow, now: datetime) -> int:
    from django.db.models import F, Value
    from django.db.models.functions import Coalesce

    from ..models import Schedule as ScheduleRow

    due_at = row.next_tick_at
    if due_at is None:  # not synced yet
        return 0
    latest = latest_tick(row.cron, row.timezone, now)
    missed = now - due_at > MISSED_GRACE
    fire = row.missed == "latest" or not missed
    outcome = TickOutcome()
    if fire:
        # The run first, then the row: a worker that dies in between leaves the
        # tick due, and whoever starts it next gets the same key, so one run.
        outcome = start_tick(row, latest)
    else:
        logger.warning(
            "schedule of %s: ticks from %s to %s were missed (no worker ran); skipping to the next tick",
            row.name,
            due_at.isoformat(),
            latest.isoformat(),
        )
    following = next(ticks_after(row.cron, row.timezone, max(latest, now)))
    # Compare-and-set on next_tick_at (it always moves on, unlike last_tick_at):
    # a worker that lost the race leaves the winner's values alone.
    # A buffered tick is kept only if none is (BUFFER_ONE drops the later ones).
    buffered = Coalesce(F("buffered_tick_at"), Value(latest)) if outcome.buffered else F("buffered_tick_at")
    ScheduleRow.objects.filter(pk=row.pk, next_tick_at=due_at).update(
        last_tick_at=latest if fire else row.last_tick_at, next_tick_at=following, buffered_tick_at=buffered
    )
    return outcome.created


class Scheduler:
    """Fires due schedules from a loop that runs anyway (the worker's claim loop, the Celery sweep).

    ``tick()`` is cheap to call often: it works at most once per ``interval``
    seconds, does nothing (no query) when no workflow declares a schedule,
    syncs the rows on first use, and never raises: a database error is
    logged and the next tick tries again.

    Not thread-safe, and needs not be: each instance is confined to the one
    thread that ticks it (the worker's claim loop, the sweep loop).
    """

    def __init__(self, interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._due_at = 0.0
        self._synced = False

    def tick(self) -> int:
        """Start the runs of due ticks, if a second has passed since the last look; returns how many."""
        from django.db import DatabaseError

        moment = self._clock()
        if moment < self._due_at:
            return 0
        self._due_at = moment + self.interval
        if not declared_schedules():
            return 0
        try:
            if not self._synced:
                sync_schedules()
                self._synced = True
            return fire_due_schedules()
        except DatabaseError as exc:
            from .runner import recycle_connections

            logger.warning("firing schedules failed (%s); trying again in %.0fs", exc, self.interval)
            recycle_connections()
        except Exception:  # a schedule must never take the loop that carries it down
            logger.exception("firing schedules failed; trying again in %.0fs", self.interval)
        return 0
