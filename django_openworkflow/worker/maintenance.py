"""The periodic sweeps a worker process runs beside its claims, each on a thread of its own (``turns.py``)."""

from __future__ import annotations

from ..conf import owf_settings
from ..definitions.retention import prune_interval
from ..store.aging import aged_runs_exist
from .aging import AgingSweeper
from .prune import PruneSweeper
from .turns import TurnSweeper


def sweepers() -> list[TurnSweeper]:
    """Retention's prune every ``PRUNE_INTERVAL``, and priority aging's when it is on (or was); not started."""
    found: list[TurnSweeper] = []
    interval = prune_interval()
    if interval is not None:
        found.append(PruneSweeper(interval))
    aging = owf_settings.priority_aging
    # Off, but runs it raised while it was on remain (one indexed probe at start): they get their declared priority.
    if aging is not None or aged_runs_exist():
        found.append(AgingSweeper(aging))
    return found
