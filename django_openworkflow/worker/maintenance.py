"""The periodic sweeps a worker process runs beside its claims, each on a thread of its own (``turns.py``)."""

from __future__ import annotations

from ..conf import owf_settings
from ..definitions.retention import prune_interval
from .aging import AgingSweeper
from .prune import PruneSweeper
from .task_timers import TaskTimerSweeper
from .turns import TurnSweeper


def sweepers() -> list[TurnSweeper]:
    """Retention's prune every ``PRUNE_INTERVAL``, priority aging's (see :class:`AgingSweeper`), and the human
    tasks' timers every ``TASK_TIMERS_INTERVAL``; not started."""
    found: list[TurnSweeper] = []
    interval = prune_interval()
    if interval is not None:
        found.append(PruneSweeper(interval))
    timers = owf_settings.task_timers_interval
    if timers is not None:
        found.append(TaskTimerSweeper(timers))
    # Off, the sweep still looks once (on its thread) whether runs it raised while it was on remain.
    found.append(AgingSweeper(owf_settings.priority_aging))
    return found
