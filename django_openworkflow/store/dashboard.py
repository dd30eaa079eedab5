"""Read-only figures behind the admin's dashboard: runs finished per minute, failure rate, durations, queues now.

A fixed number of queries whatever the number of runs: one aggregate by
minute and outcome over the finished-runs index, one read of the latest
finished runs' start and end (at most :data:`DURATION_SAMPLE` rows) for the
percentiles, the metrics' queue gauges (``store/telemetry.py``), and the
retrying and waiting runs now (one aggregate over the parked runs).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Count, QuerySet
from django.db.models.functions import Trunc

from ..models import WorkflowRun
from ..states import DisplayStatus, RunStatus
from .gauges import QueueDepth, due_by_queue, held_by_workflow
from .run_states import status_q

OUTCOMES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)
"""How runs end, in the order the charts stack them."""
DURATION_SAMPLE = 20_000
"""The latest finished runs the duration percentiles are computed from (all of them when fewer)."""


@dataclass(frozen=True)
class Bucket:
    """Runs that finished from ``start`` for ``minutes`` minutes, by outcome."""

    start: datetime
    minutes: int
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class Durations:
    """How long one workflow's runs took, start to finish, over the window."""

    workflow_name: str
    runs: int
    p50: timedelta
    p95: timedelta


@dataclass(frozen=True)
class Dashboard:
    now: datetime
    since: datetime
    buckets: list[Bucket]
    finished: dict[str, int]
    durations: list[Durations]
    queues: list[QueueDepth]
    in_flight: int
    sampled: bool  # the percentiles come from the latest DURATION_SAMPLE runs, not all
    parked: dict[str, int] = field(default_factory=dict)  # retrying and waiting runs now (run_states)
    until: datetime | None = None  # the window's end (``now`` when None)

    @property
    def failure_rate(self) -> float | None:
        """Failed among completed and failed runs in the window; None when none finished."""
        ended = self.finished[RunStatus.COMPLETED] + self.finished[RunStatus.FAILED]
        return self.finished[RunStatus.FAILED] / ended if ended else None


def read(now: datetime, hours: int, bucket_minutes: int) -> Dashboard:
    """The dashboard's figures for the ``hours`` before ``now`` (the database clock), in buckets of minutes."""
    return read_between(now - timedelta(hours=hours), now, bucket_minutes, now)


def read_between(since: datetime, until: datetime, bucket_minutes: int, now: datetime) -> Dashboard:
    """The dashboard's figures for runs that finished from ``since`` to ``until``; the queues as they are ``now``."""
    finished = WorkflowRun.objects.filter(finished_at__gte=since, finished_at__lte=until, status__in=OUTCOMES)
    buckets, totals = finished_by_bucket(finished, since, until, bucket_minutes)
    durations, sampled = _durations(finished)
    queues = due_by_queue(now)
    in_flight = sum(held_by_workflow().values())
    return Dashboard(now, since, buckets, totals, durations, queues, in_flight, sampled, parked_now(), until)


def finished_by_bucket(
    finished: QuerySet[WorkflowRun], since: datetime, until: datetime, bucket_minutes: int
) -> tuple[list[Bucket], dict[str, int]]:
    """``finished`` (runs that ended from ``since`` to ``until``) by bucket and outcome, and in all (one query)."""
    by_minute = (
        finished.order_by()
        .annotate(minute=Trunc("finished_at", "minute", tzinfo=UTC))
        .values_list("minute", "status")
        .annotate(n=Count("id"))
    )
    width = timedelta(minutes=bucket_minutes)
    first = _floor(since, bucket_minutes)
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter({outcome: 0 for outcome in OUTCOMES})
    for minute, status, n in by_minute:
        counts[int((_aware(minute) - first) / width)][status] += n
        totals[status] += n
    slots = int((until - first) / width) + 1
    buckets = [Bucket(first + i * width, bucket_minutes, {o: counts[i][o] for o in OUTCOMES}) for i in range(slots)]
    return buckets, dict(totals)


def parked_now() -> dict[str, int]:
    """How many runs are retrying and how many are waiting now (one aggregate over the parked runs)."""
    statuses = (DisplayStatus.RETRYING, DisplayStatus.WAITING)
    counts = WorkflowRun.objects.parked().aggregate(**{s: Count("status", filter=status_q(s)) for s in statuses})
    return {status: int(counts[status] or 0) for status in statuses}


def _durations(finished: QuerySet[WorkflowRun]) -> tuple[list[Durations], bool]:
    rows = list(
        finished.filter(started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("workflow_name", "started_at", "finished_at")[:DURATION_SAMPLE]
    )
    seconds: dict[str, list[float]] = defaultdict(list)
    for name, started, ended in rows:
        if started is not None and ended is not None:  # filtered in SQL; the column types allow NULL
            seconds[name].append(max(0.0, (ended - started).total_seconds()))
    result = []
    for name, values in sorted(seconds.items()):
        values.sort()
        result.append(
            Durations(
                name, len(values), timedelta(seconds=percentile(values, 50)), timedelta(seconds=percentile(values, 95))
            )
        )
    return result, len(rows) == DURATION_SAMPLE


def percentile(ordered: list[float], pct: float) -> float:
    """The nearest-rank percentile of sorted values (the value below which ``pct`` % of them lie)."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def _floor(moment: datetime, minutes: int) -> datetime:
    moment = moment.astimezone(UTC).replace(second=0, microsecond=0)
    return moment - timedelta(minutes=(moment.hour * 60 + moment.minute) % minutes)


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
