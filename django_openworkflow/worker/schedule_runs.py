"""A tick's run as the schedule's overlap policy says, and the buffered tick's: what the workers' sweep fires.

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

Backfill and trigger now are an operator's explicit requests, in
``client/schedules.py``: they start their runs whatever the overlap policy
and whether the schedule is paused, and their runs then count as the
schedule's runs for the live ticks' policy (under ``skip`` a live tick
waits for the backfill to finish; under ``cancel_previous`` the next live
tick cancels it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..definitions.cron import KEY_PREFIX, tick_key

if TYPE_CHECKING:
    from ..models import Schedule as ScheduleRow

logger = logging.getLogger("django_openworkflow.schedules")


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
