"""Run operations on every run a filter matches: a preview (count, refusals by reason) and the action, by chunks.

The admin's "select all", ``workflows cancel --all-matching`` and the API's
``POST runs/actions/...`` come through here, on top of the bulk operations
of :mod:`.operations`:

- :func:`preview` counts the runs and, in one aggregate query, how many
  each reason would leave alone; it reads a sample of runs, never all of them;
- :func:`apply_to_matching` walks the filter by keyset on
  ``(created_at, id)``, newest first, one chunk of ids at a time
  (``operations.CHUNK``), and hands each chunk to the bulk operation:
  one read and one transaction per chunk. A run that changed since the
  read is refused by the store's own conditions. A chunk is done whole
  or not at all; an error stops the walk with the earlier chunks done.

Runs created after the walk started sort before its cursor, so they are
never reached: a re-run of "every run of workflow X" does not re-run the
runs it starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from ..definitions.registry import registry
from ..errors import STEP_LIMIT_EXCEEDED, OpenWorkflowError
from ..models import StepAttempt, WorkflowRun
from ..states import FINISHED_STATUSES, DisplayStatus, RunStatus, StepKind, StepStatus
from ..store import queries
from ..store.run_states import status_q
from . import operations
from .listing import run_filter

OPERATIONS: dict[str, Callable[[list[Any]], operations.BulkResult]] = {
    "cancel": operations.cancel_many,
    "retry_now": operations.retry_now_many,
    "retry_from_failed_step": operations.retry_from_failed_step_many,
    "rerun": operations.rerun_many,
}
"""The operations that apply to a filter, by the names of ``operations.REFUSALS``."""

REASONS_SHOWN = 20
"""The most distinct reasons a preview names (re-run: one per workflow version not registered); the rest are summed."""

WAITS_FOR_DELIVERY = "it waits for a signal or an event, which retry now cannot deliver (send it instead)"
OTHER_REASONS = "other reasons"


class MatchCountChanged(OpenWorkflowError):
    """The filter matches more runs now than the count the caller confirmed: nothing was done."""

    def __init__(self, confirmed: int, count: int) -> None:
        super().__init__(
            f"the filter matches {count} runs now, more than the {confirmed} confirmed; "
            "look at the count again and confirm it"
        )
        self.confirmed, self.count = confirmed, count


@dataclass(frozen=True)
class Preview:
    """What an operation on a filter would do, read at one moment."""

    operation: str
    count: int
    """Runs the filter matches."""
    refused: dict[str, int]
    """Reason -> how many runs it would leave alone, most first."""
    sample: list[WorkflowRun]
    """The newest matching runs (at most the ``sample`` asked for), without their payloads."""
    sample_refusals: dict[Any, str]
    """Why the operation would leave each run of the sample alone, by run id (as :func:`operations.refusals`)."""

    @property
    def would_change(self) -> int:
        """Runs the operation would change (or, for re-run, start again) if nothing changes meanwhile."""
        return self.count - sum(self.refused.values())


@dataclass
class MatchResult:
    """What an operation on a filter did: counts, not ids, whatever the number of runs."""

    operation: str
    matched: int = 0
    """Runs the walk reached."""
    changed: int = 0
    """Runs changed (for re-run: runs started again)."""
    refused: Counter[str] = field(default_factory=Counter)
    """Reason -> how many runs it left alone."""
    created: list[Any] = field(default_factory=list)
    """For re-run: the first new runs' ids (at most ``keep_created``)."""


def runs_matching(**filters: Any) -> QuerySet[WorkflowRun]:
    """The runs :func:`~.listing.list_runs`'s filters select, for :func:`preview` and :func:`apply_to_matching`.

    ``status``, ``workflow``, ``queue``, ``created_after``,
    ``created_before``, ``input_contains``, ``subject``: checked as ``list_runs``
    checks them (:class:`~django_openworkflow.errors.InvalidArgument` naming a bad one).
    """
    return run_filter(**filters).apply(queries.runs())


def _check(operation: str) -> None:
    if operation not in OPERATIONS:
        raise ValueError(f"unknown operation {operation!r}; expected one of {', '.join(OPERATIONS)}")


def preview(operation: str, queryset: QuerySet[WorkflowRun], sample: int = 0) -> Preview:
    """The count, the refusals by reason (one aggregate query) and the newest ``sample`` runs."""
    _check(operation)
    queryset = queryset.order_by()
    conditions = _refusal_conditions(operation, queryset)
    aggregates = {f"r{index}": Count("pk", filter=q) for index, (_, q) in enumerate(conditions)}
    counts = queryset.aggregate(total=Count("pk"), **aggregates)
    refused: Counter[str] = Counter()
    for index, (reason, _) in enumerate(conditions):
        if counts[f"r{index}"]:
            refused[reason] += int(counts[f"r{index}"])
    ranked = refused.most_common()
    shown = dict(ranked[:REASONS_SHOWN])
    if len(ranked) > REASONS_SHOWN:
        shown[OTHER_REASONS] = sum(number for _, number in ranked[REASONS_SHOWN:])
    runs = list(_newest_first(queryset).defer("input", "output")[:sample]) if sample else []
    return Preview(operation, int(counts["total"]), shown, runs, operations.refusals(operation, runs))


def apply_to_matching(
    operation: str,
    queryset: QuerySet[WorkflowRun],
    *,
    confirm_count: int | None = None,
    chunk_size: int | None = None,
    on_chunk: Callable[[operations.BulkResult], None] | None = None,
    keep_created: int = 10,
) -> MatchResult:
    """Apply ``operation`` to every run ``queryset`` matches, one chunk at a time; counts of what it did.

    ``confirm_count`` is the count the caller showed and had confirmed:
    when the filter matches more runs now, nothing is done
    (:class:`MatchCountChanged`); fewer is fine (runs that left the filter
    meanwhile). ``on_chunk`` is called with each chunk's
    :class:`~.operations.BulkResult` once it is done (the admin logs the changes there).
    """
    _check(operation)
    apply = OPERATIONS[operation]
    if confirm_count is not None:
        count = queryset.order_by().count()
        if count > confirm_count:
            raise MatchCountChanged(confirm_count, count)
    result = MatchResult(operation)
    for chunk in matching_ids(queryset, chunk_size or operations.CHUNK):
        done = apply(chunk)
        result.matched += len(chunk)
        result.changed += len(done.changed)
        result.refused.update(done.refused.values())
        result.created += done.created[: max(0, keep_created - len(result.created))]
        if on_chunk is not None:
            on_chunk(done)
    return result


def matching_ids(queryset: QuerySet[WorkflowRun], chunk_size: int) -> Iterator[list[Any]]:
    """The ids ``queryset`` matches, newest first, ``chunk_size`` at a time (a keyset query per chunk)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    after: tuple[datetime, Any] | None = None
    while True:
        page = _newest_first(queryset)
        if after is not None:
            created_at, run_id = after
            page = page.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=run_id))
        rows = list(page.values_list("id", "created_at")[:chunk_size])
        if not rows:
            return
        yield [run_id for run_id, _ in rows]
        if len(rows) < chunk_size:
            return
        after = (rows[-1][1], rows[-1][0])


def _newest_first(queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
    return queryset.order_by("-created_at", "-id")


# -- the refusals of operations.py, as SQL conditions ------------------------------------------
#
# Each list is in the order the refusal functions test, each condition
# excluding the ones before it, so that a run counts under one reason only:
# the reason those functions would give it. The wording comes from those
# functions, called on a stand-in run, so it cannot drift.

Conditions = list[tuple[str, Q]]


def _finished(reason: Callable[[WorkflowRun], str]) -> Conditions:
    return [(reason(WorkflowRun(status=status)), Q(status=status)) for status in FINISHED_STATUSES]


def _refusal_conditions(operation: str, queryset: QuerySet[WorkflowRun]) -> Conditions:
    finished = Q(status__in=FINISHED_STATUSES)
    if operation == "cancel":
        return [
            *_finished(operations.cancel_refusal),
            (
                operations.cancel_refusal(WorkflowRun(status=RunStatus.RUNNING, cancel_requested_at=timezone.now())),
                ~finished & Q(cancel_requested_at__isnull=False),
            ),
        ]
    if operation == "retry_now":
        now = timezone.now()
        free = ~finished & Q(worker_id__isnull=True)
        waits = Exists(
            StepAttempt.objects.filter(
                workflow_run_id=OuterRef("pk"), kind__in=(StepKind.SIGNAL, StepKind.EVENT), status=StepStatus.RUNNING
            )
        )
        return [
            *_finished(lambda run: operations.retry_now_refusal(run, None)),
            (
                operations.retry_now_refusal(WorkflowRun(status=RunStatus.RUNNING, worker_id="w"), None),
                ~finished & Q(worker_id__isnull=False),
            ),
            (WAITS_FOR_DELIVERY, free & Q(waits)),
            (
                operations.retry_now_refusal(WorkflowRun(status=RunStatus.PENDING, available_at=now), None),
                free & ~Q(waits) & Q(available_at__lte=now),
            ),
        ]
    if operation == "retry_from_failed_step":
        # A run that has not failed is named as the pages name it: status_q holds the same rules.
        not_failed = [
            (operations.retry_failed_refusal(WorkflowRun(status=RunStatus.PENDING)), Q(status=RunStatus.PENDING)),
            *(
                (operations.retry_failed_refusal(WorkflowRun(status=RunStatus.RUNNING), str(shown)), status_q(shown))
                for shown in (
                    DisplayStatus.RUNNING,
                    DisplayStatus.RETRYING,
                    DisplayStatus.WAITING,
                    DisplayStatus.PARKED,
                )
            ),
            *(
                (operations.retry_failed_refusal(WorkflowRun(status=status)), Q(status=status))
                for status in FINISHED_STATUSES
                if status != RunStatus.FAILED
            ),
        ]
        step_limit = WorkflowRun(status=RunStatus.FAILED, error={"type": STEP_LIMIT_EXCEEDED})
        return [
            *not_failed,
            (operations.retry_failed_refusal(step_limit), Q(status=RunStatus.FAILED, error__type=STEP_LIMIT_EXCEEDED)),
        ]
    # rerun: one reason per workflow version this process has not registered.
    unregistered = Q()
    for spec in registry.all():
        unregistered &= ~_same(spec.name, spec.version)
    missing = queryset.filter(unregistered).values_list("workflow_name", "version").distinct()
    pairs = list(missing[: REASONS_SHOWN + 1])
    conditions = [
        (operations.rerun_refusal(WorkflowRun(workflow_name=name, version=version)), _same(name, version))
        for name, version in pairs[:REASONS_SHOWN]
    ]
    if len(pairs) > REASONS_SHOWN:
        others = unregistered
        for _, q in conditions:
            others &= ~q
        conditions.append((OTHER_REASONS, others))
    return conditions


def _same(name: str, version: str | None) -> Q:
    return Q(workflow_name=name, version__isnull=True) if version is None else Q(workflow_name=name, version=version)
