"""Deleting expired runs: ``manage.py workflows prune``, and the workers' sweep every ``PRUNE_INTERVAL``.

What a run's retention is, and when it expires, is ``definitions/retention.py``;
the SQL is ``store/prune.py``.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import DatabaseError, IntegrityError, connections, transaction

from ..conf import owf_settings
from ..definitions.retention import global_retention

logger = logging.getLogger("django_openworkflow.retention")

__all__ = ["PruneSweeper", "Pruned", "prune", "take_prune_turn"]


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
    from .. import hooks
    from ..store import get_backend
    from ..store import prune as store

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
    from ..models import Gate
    from ..store import get_backend

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
