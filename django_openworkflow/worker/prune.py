"""Deleting expired runs: ``manage.py workflows prune``, and the workers' sweep every ``PRUNE_INTERVAL``.

What a run's retention is, and when it expires, is ``definitions/retention.py``;
the SQL is ``store/prune.py``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from ..conf import owf_settings
from ..definitions.retention import global_retention
from .turns import TurnSweeper, take_turn

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
    """Whether this process may prune now: the first to ask in each interval gets the turn (see ``turns.py``)."""
    return take_turn(PRUNE_TURN_PREFIX, interval)


class PruneSweeper(TurnSweeper):
    """A worker's thread that prunes every ``PRUNE_INTERVAL`` (with jitter), when it gets the turn.

    It never takes a claim slot; its batches are short transactions. A
    failing sweep is logged and tried again at the next interval.
    """

    turn_prefix = PRUNE_TURN_PREFIX
    what = "prune sweep"

    def __init__(self, interval: timedelta) -> None:
        super().__init__("owf-prune", interval, logger)

    def sweep(self) -> dict[str, int]:
        """Prune; what it deleted per workflow."""
        deleted = prune(stop=self._stop_event.is_set)
        if deleted.runs:
            logger.info("pruned %d expired run(s) and %d event(s)", sum(deleted.runs.values()), deleted.events)
        return deleted.runs
