"""A schedule's runs: the overlap policy of a tick, backfilling past ticks, and "trigger now".

The runs of a schedule are its workflow's runs whose idempotency key
begins ``schedule:``: the live ticks' and the backfilled ones
(``schedule:<tick in UTC>``, the same key for a tick either way, so a
tick has one run whoever starts it) and the triggered ones
(``schedule:now:<time>/<nonce>``, which no tick's key can equal).

Overlap (``Schedule.overlap``), decided when a tick fires, against the
runs of the schedule that are unfinished (pending or running) then:

- ``allow_all``: the tick's run starts anyway (the default, and what every
  schedule did before the policy existed).
- ``skip``: no run for the tick.
- ``buffer_one``: the tick is kept in the row's ``buffered_tick_at``
  (unless a tick is kept already: later ones are dropped, as Temporal's
  BUFFER_ONE drops them); every worker's look (once a second) starts the
  buffered tick's run, with that tick's key, once no run is unfinished.
  It lives in the database, so a restart of every worker loses nothing,
  and the key makes it one run whichever workers start it.
- ``cancel_previous``: the tick's run starts and the unfinished runs are
  canceled, in one transaction.

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

from ..definitions.cron import KEY_PREFIX, tick_key, ticks_after, trigger_key, zone_name
from ..errors import InvalidArgument

if TYPE_CHECKING:
    from ..client.handle import RunHandle
    from ..definitions.flow import Schedule
    from ..models import Schedule as ScheduleRow

logger = logging.getLogger("django_openworkflow.schedules")

BACKFILL_LIMIT = 10_000
"""The most ticks one backfill starts runs for: a longer range is refused (split it)."""


def unfinished_runs(name: str, but: str | None = None) -> list[Any]:
    """The ids of the schedule's runs (keys ``schedule:``) that are pending or running, but the one keyed ``but``."""
    from ..models import WorkflowRun
    from ..states import RunStatus

    runs = WorkflowRun.objects.filter(
        workflow_name=name, idempotency_key__startswith=KEY_PREFIX, status__in=(RunStatus.PENDING, RunStatus.RUNNING)
    )
    if but is not None:
        runs = runs.exclude(idempotency_key=but)
    return list(runs.values_list("id", flat=True))


@dataclass(frozen=True)
class TickOutcome:
    """What firing a tick did: ``created`` a run (0 or 1), or ``buffered`` the tick for later."""

    created: int = 0
    buffered: bool = False


def start_tick(row: ScheduleRow, tick: datetime) -> TickOutcome:
    """Start the run of ``tick`` as the row's overlap policy says (the module's docstring)."""
    from django.db import transaction

    from ..client.operations import cancel_many
    from ..client.runs import start_run
    from ..store import get_backend

    key = tick_key(tick)
    if row.overlap == "allow_all":
        return TickOutcome(int(start_run(row.name, row.input, idempotency_key=key).created))
    if row.overlap == "cancel_previous":
        with transaction.atomic(using=get_backend().alias):
            created = start_run(row.name, row.input, idempotency_key=key).created
            previous = unfinished_runs(row.name, but=key)
            if previous:
                cancel_many(previous)
                logger.info("schedule of %s: tick %s canceled %d unfinished run(s)", row.name, key, len(previous))
        return TickOutcome(int(created))
    # A worker that started this tick's run and died before moving the row on
    # left it unfinished: it is this tick's run, not a previous one.
    if unfinished_runs(row.name, but=key):
        if row.overlap == "buffer_one":
            logger.info("schedule of %s: tick %s waits for the unfinished run", row.name, tick.isoformat())
            return TickOutcome(buffered=True)
        logger.info("schedule of %s: tick %s skipped, a run is unfinished", row.name, tick.isoformat())
        return TickOutcome()
    return TickOutcome(int(start_run(row.name, row.input, idempotency_key=key).created))


def start_buffered(row: ScheduleRow) -> int:
    """Start the buffered tick's run if no run of the schedule is unfinished; returns how many runs it created.

    The run first, then the row (a compare-and-set on the tick): a worker
    that dies in between leaves the tick buffered, and whoever starts it
    next gets the same key, so one run.
    """
    from ..client.runs import start_run
    from ..models import Schedule as ScheduleRow

    tick = row.buffered_tick_at
    if tick is None:
        return 0
    key = tick_key(tick)
    if unfinished_runs(row.name, but=key):
        return 0
    created = start_run(row.name, row.input, idempotency_key=key).created
    ScheduleRow.objects.filter(pk=row.pk, buffered_tick_at=tick).update(buffered_tick_at=None)
    row.buffered_tick_at = None
    return int(created)


# -- what an operator asks for ---------------------------------------------------------


def declared_schedules() -> dict[str, Schedule]:
    """The schedule of each workflow name whose latest version declares one, in this process."""
    from ..definitions.registry import registry

    latest: dict[str, Any] = {}
    for spec in registry.all():  # sorted by name, then version: the last one of a name wins
        latest[spec.name] = spec
    return {name: spec.schedule for name, spec in latest.items() if spec.schedule is not None}


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
    from ..client.runs import start_runs

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
    from ..client.runs import start_run
    from ..store import get_backend

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
