"""Read-only queries for the admin and the command line: counts, listings, one run's page.

Nothing here writes. Every function issues a fixed number of queries,
whatever the number of runs or steps, so pages built on them stay cheap.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connections
from django.db.models import Count, F, Q, QuerySet

from ..conf import owf_settings
from ..definitions.attributes import AttributeCondition
from ..models import IS_HELD, Signal, StepAttempt, WorkflowRun
from ..states import CLAIMABLE_STATUSES, DisplayStatus, RunStatus, StepKind, StepStatus
from .attributes import with_attributes
from .run_states import DISPLAY_STATUSES, status_q, with_error_summary

PARKED = DisplayStatus.PARKED
"""A display status, not a stored one (see :class:`~django_openworkflow.states.DisplayStatus`)."""

# JSON columns the list views never show: leaving them out keeps a page of
# 100 runs from reading 100 inputs and outputs of up to 1 MiB each.
PAYLOAD_FIELDS = ("input", "output", "error")


STATUS_FIELD_VALUES: tuple[str, ...] = (RunStatus.PENDING, RunStatus.RUNNING, PARKED, *RunStatus.values()[2:])
"""What :func:`display_status` (a run's JSON ``status``) may say."""


def display_status(status: str, worker_id: str | None) -> str:
    """``parked`` for a running run no worker holds (retrying, waiting or parked), else ``status``.

    The coarse status: what the JSON ``status`` field of a run says (kept for
    compatibility). Pages show :func:`~.run_states.state_of`, which tells
    retrying, waiting and parked runs apart.
    """
    if status == RunStatus.RUNNING and worker_id is None:
        return PARKED
    return status


def runs() -> QuerySet[WorkflowRun]:
    """All runs on the workflow database, newest first."""
    return WorkflowRun.objects.order_by("-created_at", "-id")


def status_counts(queryset: QuerySet[WorkflowRun] | None = None) -> dict[str, int]:
    """How many runs are in each display status, in one aggregate query."""
    qs = runs() if queryset is None else queryset
    # Counting "status", which the filters read anyway, spares reading another column.
    counts = qs.aggregate(**{status: Count("status", filter=status_q(status)) for status in DISPLAY_STATUSES})
    return {status: int(counts[status] or 0) for status in DISPLAY_STATUSES}


def _distinct(cte: str, column: str, condition: str = "") -> str:
    """A recursive CTE ``cte(name)``: the distinct values of ``column`` (where ``condition``), one hop per value.

    A plain DISTINCT reads every row (about 100 ms at 100,000 runs). This
    hops from one value to the next through an index that starts with
    ``column``, so it costs one index probe per distinct value, however many
    runs there are. SQLite, PostgreSQL and MariaDB/MySQL all run it as written.
    """
    connection = connections[owf_settings.database]
    quote = connection.ops.quote_name
    table, name = quote(WorkflowRun._meta.db_table), quote(column)
    where, also = (f" WHERE {condition}", f"{condition} AND ") if condition else ("", "")
    return (
        f"{cte}(name) AS ("
        f" SELECT MIN({name}) FROM {table}{where}"
        f" UNION ALL"
        f" SELECT (SELECT MIN({name}) FROM {table} WHERE {also}{name} > {cte}.name)"
        f" FROM {cte} WHERE {cte}.name IS NOT NULL"
        f")"
    )


def _unfinished() -> str:
    """``status IN ('pending', 'running')`` with literals, as in the claim indexes' condition (so they are used)."""
    statuses = ", ".join(f"'{status.value}'" for status in CLAIMABLE_STATUSES)
    return f"{connections[owf_settings.database].ops.quote_name('status')} IN ({statuses})"


def _names(sql: str) -> list[tuple[Any, str]]:
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute(sql)
        return [(row[0], row[1]) for row in cursor.fetchall() if row[1] is not None]


def workflow_names() -> list[str]:
    """Every workflow name present in the table, sorted; one query through the (workflow_name, created_at) index."""
    return sorted(
        name for _, name in _names(f"WITH RECURSIVE {_distinct('names', 'workflow_name')} SELECT 0, name FROM names")
    )


def queue_names() -> list[str]:
    """The queues unfinished runs wait in, sorted; one query through the claim's (queue, priority, available_at) index.

    That index holds pending and running runs only, so queues only finished
    runs remember are left out (finding them would cost a scan of the table).
    """
    sql = f"WITH RECURSIVE {_distinct('queues', 'queue', _unfinished())} SELECT 1, name FROM queues"
    return sorted(name for _, name in _names(sql))


def workflow_names_and_queues() -> tuple[list[str], list[str]]:
    """:func:`workflow_names` and :func:`queue_names` in one query, for the run list's filters."""
    sql = (
        f"WITH RECURSIVE {_distinct('names', 'workflow_name')}, {_distinct('queues', 'queue', _unfinished())}"
        f" SELECT 0, name FROM names UNION ALL SELECT 1, name FROM queues"
    )
    rows = _names(sql)
    return sorted(name for kind, name in rows if kind == 0), sorted(name for kind, name in rows if kind == 1)


def workflow_versions(workflow_name: str) -> list[str | None]:
    """The versions one workflow's runs have, sorted (None first); one query on that workflow's rows."""
    versions = runs().filter(workflow_name=workflow_name).order_by().values_list("version", flat=True).distinct()
    return sorted(set(versions), key=lambda version: (version is not None, version or ""))


@dataclass(frozen=True)
class WorkflowStats:
    """Run counts of one workflow, by display status."""

    workflow_name: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Runs of this workflow in any status."""
        return sum(self.counts.values())


def stats_by_workflow() -> list[WorkflowStats]:
    """Counts by workflow name and display status, in one grouped query."""
    rows: Any = (  # values() rows with one key per status: django-stubs cannot type them
        runs()
        .order_by()
        .values("workflow_name")
        .annotate(**{status: Count("status", filter=status_q(status)) for status in DISPLAY_STATUSES})
        .order_by("workflow_name")
    )
    return [
        WorkflowStats(row["workflow_name"], {status: int(row[status]) for status in DISPLAY_STATUSES}) for row in rows
    ]


BLOCKED = Q(status__in=CLAIMABLE_STATUSES, blocked_at__isnull=False, worker_id__isnull=True)
"""Waiting for a place under a concurrency limit (``available_at`` is then a probe time or ``BLOCKED_UNTIL``)."""

QUEUE_COLUMNS = ("due", "scheduled", "blocked", "running", "parked")
"""What ``workflows stats --by-queue`` counts of a queue's unfinished runs; each run is in exactly one."""


def queue_q(column: str, now: datetime) -> Q:
    """The filter for one of :data:`QUEUE_COLUMNS` at ``now`` (``running``: held by a worker)."""
    free = Q(worker_id__isnull=True, blocked_at__isnull=True)
    conditions = {
        "due": Q(status__in=CLAIMABLE_STATUSES, available_at__lte=now) & free,
        "scheduled": Q(status=RunStatus.PENDING, available_at__gt=now) & free,
        "blocked": BLOCKED,
        "running": IS_HELD,
        "parked": Q(status=RunStatus.RUNNING, available_at__gt=now) & free,
    }
    return conditions[column]


@dataclass(frozen=True)
class QueueStats:
    """Unfinished runs of one queue, by :data:`QUEUE_COLUMNS`."""

    queue: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Unfinished runs in this queue."""
        return sum(self.counts.values())


def stats_by_queue(now: datetime) -> list[QueueStats]:
    """Unfinished runs by queue: due now, scheduled, blocked on concurrency, running, parked; one grouped query."""
    rows: Any = (  # values() rows with one key per column: django-stubs cannot type them
        WorkflowRun.objects.claimable()
        .order_by()
        .values("queue")
        .annotate(**{column: Count("status", filter=queue_q(column, now)) for column in QUEUE_COLUMNS})
        .order_by("queue")
    )
    return [QueueStats(row["queue"], {column: int(row[column]) for column in QUEUE_COLUMNS}) for row in rows]


@dataclass(frozen=True)
class RunFilter:
    """Which runs a listing shows: every field narrows it; unset fields do not.

    ``statuses`` are display statuses (``parked`` among them); the time
    range is on ``created_at``, ``created_after`` inclusive and
    ``created_before`` exclusive; ``input_contains`` is a JSON object the
    run's input must contain (``store/containment.py``: one rule everywhere);
    ``subject`` is an object's (model label, primary key as text);
    ``attributes`` are checked conditions on typed attributes, all met.
    """

    statuses: tuple[str, ...] = ()
    workflow_name: str | None = None
    queue: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    input_contains: dict[str, Any] | None = None
    subject: tuple[str, str] | None = None
    """(model label, primary key as text): the runs linked to that object (client/subjects.py)."""
    attributes: tuple[AttributeCondition, ...] = ()
    """Conditions on typed attributes (``store/attributes.py``), each typed as its attribute is declared."""

    def apply(self, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        if self.statuses:
            condition = Q()
            for status in self.statuses:
                condition |= status_q(status)
            queryset = queryset.filter(condition)
        if self.workflow_name:
            queryset = queryset.filter(workflow_name=self.workflow_name)
        if self.queue:
            queryset = queryset.filter(queue=self.queue)
        if self.created_after is not None:
            queryset = queryset.filter(created_at__gte=self.created_after)
        if self.created_before is not None:
            queryset = queryset.filter(created_at__lt=self.created_before)
        if self.subject is not None:
            queryset = queryset.filter(subject_type=self.subject[0], subject_id=self.subject[1])
        if self.attributes:
            queryset = with_attributes(queryset, self.attributes)
        if self.input_contains is not None:
            from . import get_backend

            queryset = get_backend().input_containing(queryset, self.input_contains)
        return queryset


def list_runs(
    *,
    statuses: list[str] | None = None,
    workflow_name: str | None = None,
    queue: str | None = None,
    limit: int = 20,
    where: RunFilter | None = None,
    after: tuple[datetime, uuid.UUID] | None = None,
    payloads: bool = False,
) -> list[WorkflowRun]:
    """The newest ``limit`` runs ``where`` selects (or of some display statuses, one workflow and one queue).

    ``after`` is the (created_at, id) of the last run of the previous page:
    pages are read by keyset on (created_at, id) over the created_at index, so the
    thousandth page costs what the first does and a run started meanwhile
    neither repeats nor skips one. Payloads are left out unless asked for.
    """
    where = where or RunFilter(tuple(statuses or ()), workflow_name, queue)
    qs = where.apply(runs())
    if not payloads:
        qs = with_error_summary(qs.defer(*PAYLOAD_FIELDS))
    if after is not None:
        created_at, run_id = after
        qs = qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=run_id))
    return list(qs[:limit])


def parse_run_id(value: Any) -> uuid.UUID | None:
    """``value`` as a run id, or None when it is not a UUID at all."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except ValueError:
        return None


def run_with_parent(run_id: Any) -> WorkflowRun | None:
    """One run with its parent step attempt and parent run (one query), or None.

    The parent's payloads are left out: the run page only links to it.
    """
    parsed = parse_run_id(run_id)
    if parsed is None:
        return None
    return (
        runs()
        .select_related("parent_step_attempt__workflow_run")
        .defer(*(f"parent_step_attempt__{name}" for name in ("output", "error", "context")))
        .defer(*(f"parent_step_attempt__workflow_run__{name}" for name in PAYLOAD_FIELDS))
        .filter(id=parsed)
        .first()
    )


def journal(run_id: Any) -> list[StepAttempt]:
    """Every step attempt of a run in the order it was written, with child runs (one query)."""
    return list(
        StepAttempt.objects.filter(workflow_run_id=run_id)
        .select_related("child_workflow_run")
        .defer(*(f"child_workflow_run__{name}" for name in PAYLOAD_FIELDS))
        .order_by("id")
    )


def last_failed_attempt(run_id: Any, step_name: str) -> StepAttempt | None:
    """The latest failed attempt of one step of a run, or None (one query)."""
    parsed = parse_run_id(run_id)
    if parsed is None:
        return None
    attempts = StepAttempt.objects.filter(workflow_run_id=parsed, step_name=step_name, status=StepStatus.FAILED)
    return attempts.order_by("-id").first()


def run_signals(run_id: Any, limit: int = 100) -> list[Signal]:
    """A run's signals, oldest first: buffered ones and consumed ones (one query, at most ``limit``).

    Buffered signals (``consumed_by`` NULL) come first, so a long history of
    consumed ones never pushes a pending one off the page.
    """
    return list(
        Signal.objects.filter(workflow_run_id=run_id).order_by(F("consumed_by_id").asc(nulls_first=True), "id")[:limit]
    )


def approval_activity(run_id: Any) -> dict[int, tuple[str, list[dict[str, Any]]]]:
    """Per wait (its attempt id) of the run's approvals and tasks: who holds it, and its activity (one query)."""
    from ..models import Approval

    rows = Approval.objects.filter(workflow_run_id=run_id).values_list("attempt_id", "claimed_by", "activity")
    return {attempt_id: (holder, list(activity or [])) for attempt_id, holder, activity in rows}


def open_waits(run_ids: list[Any]) -> dict[Any, StepAttempt]:
    """The signal or event wait each of ``run_ids`` is parked in, by run id (one query)."""
    waits = StepAttempt.objects.filter(
        workflow_run_id__in=run_ids, kind__in=(StepKind.SIGNAL, StepKind.EVENT), status=StepStatus.RUNNING
    ).defer("output", "error")
    return {wait.workflow_run_id: wait for wait in waits.order_by("id")}
