"""Priority aging (``OPENWORKFLOW["PRIORITY_AGING"]``): the workers' sweep, and :func:`age_priorities` to call by hand.

The SQL, and what a run's aged priority is, are ``store/aging.py``. One
worker a turn sweeps, and a turn is one ``every`` of the setting; each worker
looks twice a turn, so a run that has waited ``k`` intervals has its ``k``
levels at most two intervals later. The bound on a run's wait follows
(docs/howto/flow-control.md "Priority aging").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.db import DatabaseError, connections

from ..conf import PriorityAging, owf_settings
from .turns import TurnSweeper

logger = logging.getLogger("django_openworkflow.aging")

__all__ = ["AGING_TURN_PREFIX", "AgingSweeper", "age_priorities"]

AGING_TURN_PREFIX = "aging-turn:"


def age_priorities(*, batch_size: int | None = None, stop: Callable[[], bool] = lambda: False) -> int:
    """Give every waiting run the priority its wait has earned now, and runs no longer waiting their declared one.

    With ``OPENWORKFLOW["PRIORITY_AGING"]`` None, every run aging raised
    before (while it was on) gets its declared priority back. Workers call
    it once a turn; tests call it after ``advance()``. Returns how many runs
    changed priority. ``stop`` is asked between batches.
    """
    from ..store import aging as store
    from ..store import get_backend

    aging = owf_settings.priority_aging
    backend = get_backend()
    batch = store.AGING_BATCH if batch_size is None else batch_size
    return sum(store.age_priorities(backend, aging, backend.now(), batch, stop))


RESTORE_INTERVAL = timedelta(minutes=1)
"""With aging turned off while runs it raised remain: how often the sweep looks for them."""


class AgingSweeper(TurnSweeper):
    """A worker's thread that ages priorities once every ``every`` (looking twice as often), when it gets the turn.

    With ``aging`` None (off) it looks once, on its thread, whether runs
    aging raised while it was on remain; only then does it go on, giving
    them their declared priority back once every :data:`RESTORE_INTERVAL`.
    Otherwise the thread ends there: off, aging costs a worker one indexed
    probe when it starts.
    """

    turn_prefix = AGING_TURN_PREFIX
    what = "priority aging sweep"

    def __init__(self, aging: PriorityAging | None) -> None:
        every = RESTORE_INTERVAL if aging is None else aging.every
        super().__init__("owf-aging", every, logger, look_every=every / 2)
        self.aging = aging

    def run(self) -> None:
        if self.aging is None and not self._runs_to_restore():
            connections.close_all()
            return
        super().run()

    def _runs_to_restore(self) -> bool:
        from ..store.aging import aged_runs_exist

        try:
            return aged_runs_exist()
        except DatabaseError:  # no tables yet, or no database: the worker says so; the next start looks again
            return False

    def sweep(self) -> int:
        """Age the waiting runs; how many changed priority."""
        changed = age_priorities(stop=self._stop_event.is_set)
        if changed:
            logger.info("priority aging: %d run(s) changed priority", changed)
        return changed
