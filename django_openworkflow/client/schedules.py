"""A schedule's runs on demand, and the schedules' state: what an operator asks for.

The front door of schedules for people and the faces they use (the
admin's *Schedules* page, ``manage.py workflows schedule(s)``, the API's
``schedules`` routes, and the package's :func:`backfill_schedule` and
:func:`trigger_schedule`). Firing the ticks themselves, with the overlap
policy, is the workers' (``worker/schedules.py``, ``worker/schedule_runs.py``).

The runs of a schedule are its workflow's runs whose idempotency key
begins ``schedule:``: the live ticks' and the backfilled ones
(``schedule:<tick in UTC>``, the same key for a tick either way, so a
tick has one run whoever starts it) and the triggered ones
(``schedule:now:<time>/<nonce>``, which no tick's key can equal).

Backfill and trigger now are an operator's explicit requests: they start
their runs whatever the overlap policy and whether the schedule is paused,
and their runs then count as the schedule's runs for the live ticks'
policy (under ``skip`` a live tick waits for the backfill to finish;
under ``cancel_previous`` the next live tick cancels it).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..definitions.cron import tick_key, ticks_after, trigger_key, zone_name
from ..errors import InvalidArgument

if TYPE_CHECKING:
    from ..definitions.flow import Schedule
    from ..models import Schedule as ScheduleRow
    from .handle import RunHandle

logger = logging.getLogger("django_openworkflow.schedules")

BACKFILL_LIMIT = 10_000
"""The most ticks one backfill starts runs for: a longer range is refused (split it)."""


def declared_schedules() -> dict[str, Schedule]:
    """The schedule of each workflow name whose latest version declares one, in this process."""
    from ..definitions.registry import registry

    latest: dict[str, Any] = {}
    for spec in registry.all():  # sorted by name, then version: the last one of a name wins
        latest[spec.name] = spec
    return {name: spec.schedule for name, spec in latest.items() if spec.schedule is not None}


def next_ticks(schedule: Schedule | ScheduleRow, count: int = 5, now: datetime | None = None) -> list[datetime]:
    """The next ``count`` ticks after ``now`` (default: the database clock), in UTC: what the admin shows."""
    from ..definitions.flow import Schedule
    from ..store import get_backend

    if isinstance(schedule, Schedule):
        schedule.check()
    zone = zone_name(schedule.timezone) if isinstance(schedule, Schedule) else schedule.timezone
    ticks = ticks_after(schedule.cron, zone, get_backend().now() if now is None else now)
    return [next(ticks) for _ in range(count)]


def _declared(name: Any) -> tuple[str, Schedule]:
    name = getattr(name, "name", name)  # a WorkflowSpec, or its name
    declared = declared_schedules()
    if not isinstance(name, str) or name not in declared:
        known = ", ".join(repr(known) for known in sorted(declared)) or "none"
        raise InvalidArgument(
            f"no workflow named {name!r:.80} declares a schedule in this process (declared: {known})", "name"
        )
    return name, declared[name]


def _moment(value: Any, zone: str, what: str) -> datetime:
    """An aware datetime; a naive one (or an ISO 8601 string without offset) is read in the schedule's zone."""
    from zoneinfo import ZoneInfo

    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgument(f"{what} must be an ISO 8601 date and time, got {value!r:.80}", what) from None
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{what} must be a datetime, got {value!r:.80}", what)
    if not 1900 <= value.year <= 9998:  # beyond, converting it to UTC (or a microsecond off it) can overflow
        raise InvalidArgument(f"{what} must be between the years 1900 and 9998, got {value.isoformat()}", what)
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo(zone))
    return value.astimezone(UTC)


def backfill_ticks(name: Any, start: Any, end: Any) -> tuple[str, list[datetime]]:
    """The workflow's name and the ticks of its schedule in ``[start, end)``, up to the database's now.

    Raises :class:`InvalidArgument` for an unknown schedule, a bad or empty
    range, or one of more than :data:`BACKFILL_LIMIT` ticks.
    """
    from datetime import timedelta

    from ..store import get_backend

    name, schedule = _declared(name)
    zone = zone_name(schedule.timezone)
    first, last = _moment(start, zone, "start"), _moment(end, zone, "end")
    if first >= last:
        raise InvalidArgument(f"start ({first.isoformat()}) must be before end ({last.isoformat()})", "end")
    # Ticks still to come are the schedule's to fire, at their time.
    last = min(last, get_backend().now() + timedelta(microseconds=1))
    ticks: list[datetime] = []
    for tick in ticks_after(schedule.cron, zone, first - timedelta(microseconds=1)):
        if tick >= last:
            break
        if len(ticks) == BACKFILL_LIMIT:
            raise InvalidArgument(
                f"the range from {first.isoformat()} to {last.isoformat()} holds more than {BACKFILL_LIMIT} ticks "
                f"of {schedule.cron!r}; backfill it in shorter ranges",
                "end",
            )
        ticks.append(tick)
    return name, ticks


@dataclass(frozen=True)
class Backfill:
    """What a backfill did: its ``ticks`` (UTC), and the runs it ``created`` (ticks with a run already: none)."""

    workflow: str
    ticks: list[datetime]
    runs: list[RunHandle]

    @property
    def created(self) -> int:
        return sum(handle.created for handle in self.runs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "ticks": len(self.ticks),
            "created": self.created,
            "first_tick": self.ticks[0].isoformat() if self.ticks else None,
            "last_tick": self.ticks[-1].isoformat() if self.ticks else None,
            "runs": [str(handle.id) for handle in self.runs],
        }


def backfill_schedule(workflow: Any, start: Any, end: Any) -> Backfill:
    """Start the run of each tick of ``workflow``'s schedule in ``[start, end)`` that has none yet.

    ``workflow`` is a workflow declaring a schedule, or its name; ``start``
    and ``end`` are datetimes (or ISO 8601 strings; naive ones are in the
    schedule's time zone). Each run has the tick's key, as if the tick had
    fired live, and the schedule's input: a tick that already has a run
    (live or from an earlier backfill) gets none, so backfilling twice
    starts nothing twice. Ticks after now are left to the schedule. At most
    :data:`BACKFILL_LIMIT` ticks; the overlap policy does not apply (the
    runs start together: a ``Concurrency`` limit on the workflow spaces
    them). In the caller's transaction, like ``start_runs()``.
    """
    from .runs import start_runs

    name, ticks = backfill_ticks(workflow, start, end)
    schedule = _declared(name)[1]
    keys = [tick_key(tick) for tick in ticks]
    runs = start_runs(name, [schedule.input] * len(ticks), idempotency_keys=keys) if ticks else []
    logger.info("schedule of %s: backfilled %d tick(s), %d new run(s)", name, len(ticks), sum(r.created for r in runs))
    return Backfill(name, ticks, runs)


def trigger_schedule(workflow: Any) -> RunHandle:
    """Start a run of ``workflow``'s schedule now, outside its cadence, with the schedule's input.

    Its key is ``schedule:now:<time>/<nonce>``, which no tick's key equals,
    so it never takes a tick's place; each call starts a new run, whatever
    the overlap policy and whether the schedule is paused. The run reads
    the trigger's time as ``ctx.scheduled_at``.
    """
    from ..store import get_backend
    from .runs import start_run

    name, schedule = _declared(workflow)
    key = trigger_key(get_backend().now(), uuid.uuid4().hex[:12])
    return start_run(name, schedule.input, idempotency_key=key)


def schedule_states() -> list[dict[str, Any]]:
    """Every schedule declared in code with its row's state, times in ISO 8601 (``workflows schedules``, the API).

    A schedule no worker has seen yet has no row: not paused, no tick yet.
    """
    from ..models import Schedule as ScheduleRow

    def iso(value: datetime | None) -> str | None:
        return None if value is None else value.isoformat()

    declared = declared_schedules()
    rows = {row.name: row for row in ScheduleRow.objects.filter(name__in=list(declared))}
    states = []
    for name, schedule in declared.items():
        row = rows.get(name)
        states.append(
            {
                "name": name,
                "cron": schedule.cron,
                "timezone": row.timezone if row else schedule.timezone,
                "overlap": schedule.overlap,
                "missed": schedule.missed,
                "paused": bool(row and row.paused),
                "last_tick_at": iso(row.last_tick_at if row else None),
                "next_tick_at": iso(row.next_tick_at if row else None),
                "buffered_tick_at": iso(row.buffered_tick_at if row else None),
            }
        )
    return states
