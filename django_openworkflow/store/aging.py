"""Priority aging's SQL: raising the priority of runs that wait due in their queue, in bounded batches.

With ``OPENWORKFLOW["PRIORITY_AGING"] = {"every": ..., "ceiling": ...}`` a run
that has been due for ``k`` intervals, without a worker claiming it, is
claimed at ``min(ceiling, declared + k)``, where ``declared`` is the priority
it was started with. The claim itself is not changed: it still orders by the
stored ``priority`` through its index. A sweep (``worker/aging.py``) writes
the aged priority instead, and keeps the declared one in
``declared_priority``, which is NULL for every run aging has not raised.

A sweep makes two passes, each a series of short transactions of at most
``batch`` runs, their rows locked with ``FOR UPDATE SKIP LOCKED`` (a claim
holding one keeps it; the next sweep looks again):

1. the runs aging has raised (``owf_run_aged_idx``): each gets its priority
   for the wait it is in now. A run no longer waiting (claimed, parked,
   finished) gets its declared priority back, so a run woken from a sleep,
   or retried, starts aging again from its declaration, never from what an
   earlier wait gave it.
2. the runs due for at least one interval, below the ceiling, not aged yet
   (the claim's index, oldest first): each gets its first levels.

A run's wait is counted from its ``available_at``: when it was started, woken,
backed off to, or when the lease of a worker that died ran out.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Q

from ..conf import PriorityAging
from ..models import WorkflowRun
from ..states import CLAIMABLE_STATUSES

if TYPE_CHECKING:
    from .backends.base import Backend

AGING_BATCH = 500
"""Runs read and written per transaction of a sweep."""
PAUSE = 0.005
"""Seconds between two batches: locks are not fair, and claims waiting for one go first."""

ROW_FIELDS = ("id", "status", "available_at", "priority", "declared_priority")


@dataclass(frozen=True)
class _Row:
    id: uuid.UUID
    status: str
    available_at: datetime
    priority: int
    declared_priority: int | None

    def aged(self, now: datetime, aging: PriorityAging | None) -> tuple[int, int | None]:
        """(priority, declared_priority) the run should have at ``now`` (aging off: its declared priority)."""
        declared = self.priority if self.declared_priority is None else self.declared_priority
        if aging is None or self.status not in CLAIMABLE_STATUSES or self.available_at > now:
            return declared, None  # aging off, or not waiting (held, parked, finished): as declared
        if declared >= aging.ceiling:
            return declared, None  # declared at or above the ceiling: never aged
        levels = int((now - self.available_at) / aging.every)
        priority = min(aging.ceiling, declared + levels)
        return priority, (declared if priority != declared else None)


def age_priorities(
    backend: Backend,
    aging: PriorityAging | None,
    now: datetime,
    batch: int = AGING_BATCH,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[int]:
    """One sweep at ``now``: both passes, one transaction per batch; yields how many runs each batch changed.

    With ``aging`` None (turned off) only the first pass: the runs aged
    before get their declared priority back.
    """
    after: _Row | None = None
    while not stop():  # 1. the runs aged before: as their wait now says
        aged = WorkflowRun.objects.filter(declared_priority__isnull=False).order_by("declared_priority", "id")
        if after is not None:  # on from the last one read, in the index's order (MySQL's too: id is in it)
            d = after.declared_priority
            aged = aged.filter(Q(declared_priority__gt=d) | Q(declared_priority=d, id__gt=after.id))
        rows, changed = _batch(backend, aged, now, aging, batch)
        if changed:
            yield changed
        if len(rows) < batch:
            break
        after = rows[-1]
        time.sleep(PAUSE)
    if aging is None:
        return
    waiting = (
        WorkflowRun.objects.due(now - aging.every)
        .filter(declared_priority__isnull=True, priority__lt=aging.ceiling)
        .order_by("available_at")
    )
    since: datetime | None = None
    while not stop():  # 2. runs waiting an interval or more, not aged yet: each batch leaves the set
        # On from the last due time read: not through the runs aged before (the oldest due) again.
        rows, changed = _batch(
            backend, waiting if since is None else waiting.filter(available_at__gte=since), now, aging, batch
        )
        if changed:
            yield changed
        if len(rows) < batch or not changed:
            break
        since = rows[-1].available_at
        time.sleep(PAUSE)


def aged_runs_exist() -> bool:
    """Whether aging has raised any run (one probe of ``owf_run_aged_idx``)."""
    return bool(WorkflowRun.objects.filter(declared_priority__isnull=False).exists())


def _batch(
    backend: Backend, runs: Any, now: datetime, aging: PriorityAging | None, limit: int
) -> tuple[list[_Row], int]:
    """Lock up to ``limit`` of ``runs`` (skipping locked ones) and write their aged priority; rows read, changed."""

    def write() -> tuple[list[_Row], int]:
        with backend.write_lock(), transaction.atomic(using=backend.alias):
            rows = [_Row(*row) for row in backend.lock_skipping_locked(runs).values_list(*ROW_FIELDS)[:limit]]
            groups: dict[tuple[int, int | None], list[uuid.UUID]] = defaultdict(list)
            for row in rows:
                priority, declared = row.aged(now, aging)
                if (priority, declared) != (row.priority, row.declared_priority):
                    groups[priority, declared].append(row.id)
            # One UPDATE per (priority, declared) pair: a few per batch, whatever its size.
            for (priority, declared), ids in groups.items():
                WorkflowRun.objects.filter(id__in=ids).update(priority=priority, declared_priority=declared)
            return rows, sum(map(len, groups.values()))

    return backend.retrying(write)


def declared_priority_of(priority: int, declared_priority: int | None) -> int:
    """The priority a run was started with, whether aging raised it or not (re-runs and retries start from it)."""
    return priority if declared_priority is None else declared_priority
