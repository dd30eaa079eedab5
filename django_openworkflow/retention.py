"""Retention: how long a finished run is kept, fixed on the run when it starts.

A run's retention is decided once, at start, and written on its row
(``WorkflowRun.retention``): the start's own ``retention=`` if given, else
the workflow's ``@workflow(retention=...)``, else ``OPENWORKFLOW["RETENTION"]``
(default None: kept until deleted by hand). ``OPENWORKFLOW["MAX_RETENTION"]``,
if set, caps it (a run that would be kept forever gets the ceiling). A run
expires ``retention`` after it finished; ``manage.py workflows prune`` and the
workers' sweep (:class:`PruneSweeper`) delete expired runs.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import DatabaseError, IntegrityError, connections, transaction

from .conf import owf_settings
from .durations import Duration, parse_duration

logger = logging.getLogger("django_openworkflow.retention")

__all__ = [
    "PruneSweeper",
    "Pruned",
    "expires_at",
    "parse_retention",
    "prune",
    "resolve_retention",
    "take_prune_turn",
]


def parse_retention(value: Duration | None, what: str) -> timedelta | None:
    """``value`` as a positive ``timedelta`` (None stays None); ``ValueError`` names ``what`` and the value."""
    if value is None:
        return None
    try:
        duration = parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{what} {value!r:.60} is not a valid retention: {exc}") from None
    if duration <= timedelta(0):
        raise ValueError(f"{what} {value!r:.60} is not a valid retention: it must be longer than zero")
    return duration


def _setting(key: str) -> timedelta | None:
    return parse_retention(owf_settings.raw(key), f"OPENWORKFLOW[{key!r}]")


def resolve_retention(override: timedelta | None, declared: timedelta | None) -> timedelta | None:
    """The retention a run gets: the start's, else the workflow's, else the global default; capped by the ceiling.

    Both arguments are already parsed (:func:`parse_retention`).
    """
    retention = override if override is not None else declared if declared is not None else _setting("RETENTION")
    ceiling = _setting("MAX_RETENTION")
    if ceiling is not None and (retention is None or retention > ceiling):
        return ceiling
    return retention


def global_retention() -> timedelta | None:
    """``OPENWORKFLOW["RETENTION"]``, parsed (also how long events are kept)."""
    return _setting("RETENTION")


def expires_at(finished_at: datetime | None, retention: timedelta | None) -> datetime | None:
    """When a finished run becomes prunable; None if it is kept until deleted by hand or not finished yet."""
    if finished_at is None or retention is None:
        return None
    return finished_at + retention


def prune_interval() -> timedelta | None:
    """``OPENWORKFLOW["PRUNE_INTERVAL"]``; None when the workers' sweep is off (None or 0)."""
    value = owf_settings.raw("PRUNE_INTERVAL")
    if value is None or value == 0:
        return None
    try:
        interval = parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"OPENWORKFLOW['PRUNE_INTERVAL'] {value!r:.60} is not a valid interval: {exc}") from None
    return interval if interval > timedelta(0) else None


# -- pruning ------------------------------------------------------------------


@dataclass
class Pruned:
    """What a prune deleted (or, dry, would delete): runs per workflow, and events."""

    runs: Counter[str] = field(default_factory=Counter)
    events: int = 0


def prune(
    *,
    older_than: timedelta | None = None,
    batch_size: int | None = None,
    dry_run: bool = False,
    stop: Callable[[], bool] = lambda: False,
) -> Pruned:
    """Delete the expired finished runs (and events older than ``OPENWORKFLOW["RETENTION"]``), batch by batch.

    ``older_than`` also deletes finished runs that finished longer ago than
    that, whatever their retention (runs started before retention existed
    have none). ``hooks.runs_pruned`` is sent after each committed batch.
    ``dry_run`` only counts. ``stop`` is asked between batches.
    """
    from . import hooks
    from .store import get_backend
    from .store import prune as store

    backend = get_backend()
    limit = owf_settings.prune_batch_size if batch_size is None else batch_size
    events_retention = global_retention()
    now = backend.now()
    classes = store.expired_classes(backend, now, older_than)
    result = Pruned()
    if dry_run:
        result.runs = store.count_prunable(classes)
        if events_retention is not None:
            result.events = store.count_events(now - events_retention)
        return result
    for deleted in store.batches(backend, classes, limit, stop):
        result.runs.update(deleted)
        for name, count in sorted(deleted.items()):
            hooks.send(hooks.runs_pruned, name, count=count)
    if events_retention is not None:
        while not stop():
            count = store.delete_events(backend, now - events_retention, limit)
            result.events += count
            if count < limit:
                break
    return result


# -- the workers' sweep -------------------------------------------------------

PRUNE_TURN_PREFIX = "prune-turn:"


def take_prune_turn(interval: timedelta) -> bool:
    """Whether this process may sweep now: the first to ask in each interval (database clock) gets the turn.

    The turn is a row of the gate table named after the interval's number:
    inserting it succeeds for exactly one process (its primary key decides),
    so two workers never sweep the same interval. Earlier turns' rows are
    deleted as the next one is taken.
    """
    from .models import Gate
    from .store import get_backend

    backend = get_backend()
    now = backend.now()
    number = int(now.timestamp() // interval.total_seconds())
    name = f"{PRUNE_TURN_PREFIX}{number}"
    with backend.write_lock():
        try:
            with transaction.atomic(using=backend.alias):
                Gate.objects.create(name=name)
        except IntegrityError:
            return False
        Gate.objects.filter(name__startswith=PRUNE_TURN_PREFIX).exclude(name=name).delete()
    return True


class PruneSweeper(threading.Thread):
    """A worker's thread that prunes every ``PRUNE_INTERVAL`` (with jitter), when it gets the turn.

    It never takes a claim slot; its batches are short transactions. A
    failing sweep is logged and tried again at the next interval.
    """

    def __init__(self, interval: timedelta) -> None:
        super().__init__(name="owf-prune", daemon=True)
        self.interval = interval
        self._stop_event = threading.Event()
        self.sweeps = 0  # written by this thread only; others may read it

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        seconds = self.interval.total_seconds()
        # A first look soon after start (jittered), then about once an interval.
        wait = random.uniform(0.1, min(seconds, 5.0))
        try:
            while not self._stop_event.wait(wait):
                self.sweep_once()
                wait = seconds * random.uniform(0.8, 1.2)
        finally:
            connections.close_all()

    def sweep_once(self) -> dict[str, int] | None:
        """Prune if this worker gets the turn; what it deleted per workflow, or None without the turn."""
        try:
            if not take_prune_turn(self.interval):
                return None
            deleted = prune(stop=self._stop_event.is_set)
            self.sweeps += 1
            if deleted.runs:
                logger.info("pruned %d expired run(s) and %d event(s)", sum(deleted.runs.values()), deleted.events)
            return deleted.runs
        except (DatabaseError, ValueError) as exc:
            logger.warning("prune sweep failed (%s); trying again in %s", exc, self.interval)
            for wrapper in connections.all(initialized_only=True):
                wrapper.close()
            return None
        except Exception:  # never take the worker down
            logger.exception("prune sweep failed; trying again in %s", self.interval)
            return None
