"""Read-only figures of one workflow for its admin page: runs by status, outcomes and durations over a range, failures.

A fixed number of queries whatever the number of runs:

- the runs by display status now (one aggregate over the workflow's rows);
- the versions its runs have (one query);
- the runs that finished in the range, by outcome, and how many of them have
  a start time (one aggregate over the ``finished_at`` index), and by bar and
  outcome for the chart (one aggregate, as the dashboard's);
- the p50 and the p95 run duration, each one ordered query in SQL;
- its latest failures in the range, with their error's type, message and
  step (one query; the payloads stay unread);
- its schedule row, if any (one query).

The percentiles are computed in SQL, not over a sample: the database orders
the range's durations (``finished_at - started_at``, which Django writes
for each of SQLite, PostgreSQL and MariaDB) and returns the one at the
nearest rank, so they are exact however many runs finished. Nearest rank
(the value below which ``pct`` % of them lie, an actual duration, never an
interpolation) is the dashboard's rule too, so both pages agree on a range
the dashboard did not have to sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, QuerySet

from ..models import Schedule, WorkflowRun
from ..states import RunStatus
from .dashboard import OUTCOMES, Bucket, finished_by_bucket
from .queries import PAYLOAD_FIELDS, runs, status_counts, workflow_versions
from .run_states import error_summary, with_error_summary

FAILURES_SHOWN = 10
"""How many of the latest failures the page lists."""

DURATION = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())


@dataclass(frozen=True)
class Failure:
    """One failed run: its id, version, when it finished, and its error's type, message and step."""

    run_id: Any
    version: str | None
    finished_at: datetime | None
    error: dict[str, Any]


@dataclass(frozen=True)
class WorkflowFigures:
    """What the workflow page shows of one workflow's runs."""

    workflow_name: str
    since: datetime
    until: datetime
    by_status: dict[str, int]  # every run of the workflow now, by display status
    versions: list[str | None]  # the versions its runs have, None (unversioned) first
    finished: dict[str, int]  # runs that finished in the range, by outcome
    timed: int  # of those, the runs with a start time: what the percentiles are taken over
    p50: timedelta | None
    p95: timedelta | None
    failures: list[Failure] = field(default_factory=list)
    schedule: Schedule | None = None
    buckets: list[Bucket] = field(default_factory=list)  # the runs that finished, by bar and outcome

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def failure_rate(self) -> float | None:
        """Failed among completed and failed runs in the range; None when none finished."""
        ended = self.finished[RunStatus.COMPLETED] + self.finished[RunStatus.FAILED]
        return self.finished[RunStatus.FAILED] / ended if ended else None


def read(workflow_name: str, since: datetime, until: datetime, bar_minutes: int = 60) -> WorkflowFigures:
    """The figures of ``workflow_name``: its runs now, and those that finished from ``since`` to ``until``.

    The chart's bars are ``bar_minutes`` wide.
    """
    mine = runs().filter(workflow_name=workflow_name)
    finished = mine.filter(finished_at__gte=since, finished_at__lte=until, status__in=OUTCOMES).order_by()
    counts = finished.aggregate(
        timed=Count("id", filter=Q(started_at__isnull=False)),
        **{outcome: Count("id", filter=Q(status=outcome)) for outcome in OUTCOMES},
    )
    timed = int(counts["timed"] or 0)
    durations = finished.filter(started_at__isnull=False)
    return WorkflowFigures(
        workflow_name=workflow_name,
        since=since,
        until=until,
        by_status=status_counts(mine),
        versions=workflow_versions(workflow_name),
        finished={outcome: int(counts[outcome] or 0) for outcome in OUTCOMES},
        timed=timed,
        p50=percentile_in_sql(durations, timed, 50),
        p95=percentile_in_sql(durations, timed, 95),
        failures=latest_failures(finished.filter(status=RunStatus.FAILED)),
        schedule=Schedule.objects.filter(name=workflow_name).first(),
        buckets=finished_by_bucket(finished, since, until, bar_minutes)[0],
    )


def nearest_rank(count: int, pct: float) -> int:
    """The 1-based rank of the ``pct`` percentile among ``count`` ordered values (nearest-rank method)."""
    return max(1, math.ceil(pct / 100 * count))


def percentile_in_sql(finished: QuerySet[WorkflowRun], count: int, pct: float) -> timedelta | None:
    """The nearest-rank ``pct`` percentile of the run durations of ``finished`` (``count`` rows), one query.

    ``ORDER BY finished_at - started_at LIMIT 1 OFFSET rank - 1``: the
    database sorts the durations, only one row comes back. None for no rows.
    """
    if count <= 0:
        return None
    rank = nearest_rank(count, pct)
    ordered = finished.annotate(owf_duration=DURATION).order_by("owf_duration", "id")
    found = list(ordered.values_list("owf_duration", flat=True)[rank - 1 : rank])
    if not found or found[0] is None:
        return None
    return max(found[0], timedelta(0))  # a start after the end (clocks apart) counts as no time


def latest_failures(failed: QuerySet[WorkflowRun], limit: int = FAILURES_SHOWN) -> list[Failure]:
    """The latest ``limit`` of ``failed``, newest first, with their error's summary (payloads unread)."""
    rows = with_error_summary(failed.defer(*PAYLOAD_FIELDS)).order_by("-finished_at", "-id")[:limit]
    return [Failure(run.id, run.version, run.finished_at, error_summary(run) or {}) for run in rows]
