"""Deleting expired finished runs and old events, in bounded batches (retention's SQL).

A run is expired when it finished (completed, failed, canceled or
continued) longer than its own ``retention`` ago. Runs are found per
distinct retention value (there are few) through the (retention,
finished_at) index. A run that is pending or running is never deleted,
nor a child whose parent has not finished.

Each batch is its own short transaction: on PostgreSQL and MariaDB/MySQL
its runs are locked with ``FOR UPDATE SKIP LOCKED``, so two pruners split
the work instead of deleting (and counting) the same runs; on SQLite the
process's write lock is held for one batch at a time. A batch deletes the
runs, their journals and their signals, and clears what points at them
from rows that stay, in a fixed number of statements whatever its size.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q

from ..models import Approval, Event, PublishedValue, RunAttribute, Signal, StepAttempt, StreamChunk, WorkflowRun
from ..states import FINISHED_STATUSES
from . import payload_files, queries

if TYPE_CHECKING:
    from .backends.base import Backend

PAUSE = 0.005
"""Seconds between two batches of a prune."""
EMPTY_RETRIES = 20
"""Empty batches in a row, with runs still there to delete (locked by others), before a prune leaves them."""


@dataclass(frozen=True)
class Expired:
    """One class of expired runs: those with this retention (None: any) that finished before ``before``."""

    retention: timedelta | None
    before: datetime

    def q(self) -> Q:
        q = Q(finished_at__lt=self.before)
        return q & Q(retention=self.retention) if self.retention is not None else q


def retention_values(backend: Backend) -> list[timedelta]:
    """The distinct retentions runs have (NULL aside), one index probe each."""
    sql = f"WITH RECURSIVE {queries._distinct('vals', 'retention')} SELECT name FROM vals WHERE name IS NOT NULL"
    with backend.connection.cursor() as cursor:
        cursor.execute(sql)
        values = [row[0] for row in cursor.fetchall()]
    # Stored as an interval (PostgreSQL) or as microseconds (elsewhere).
    return [value if isinstance(value, timedelta) else timedelta(microseconds=int(value)) for value in values]


def expired_classes(backend: Backend, now: datetime, older_than: timedelta | None = None) -> list[Expired]:
    """Every class of expired runs at ``now``; with ``older_than``, also every run finished longer ago than that."""
    classes = [Expired(retention, now - retention) for retention in retention_values(backend)]
    if older_than is not None:
        classes.append(Expired(None, now - older_than))
    return classes


def prunable(expired: Expired) -> Any:
    """The finished runs of one class that may be deleted: not a child whose parent has not finished."""
    parent_finished = StepAttempt.objects.filter(
        id=OuterRef("parent_step_attempt_id"), workflow_run__status__in=FINISHED_STATUSES
    )
    return (
        WorkflowRun.objects.finished()
        .filter(expired.q())
        .filter(Q(parent_step_attempt__isnull=True) | Exists(parent_finished))
    )


def count_prunable(classes: list[Expired]) -> Counter[str]:
    """How many runs each workflow would lose (``prune --dry-run``); counts a run in two classes once."""
    counts: Counter[str] = Counter()
    ids: set[Any] = set()
    for expired in classes:
        if expired.retention is None:  # --older-than: the runs not counted by their retention's class
            rows = prunable(expired).values_list("id", "workflow_name")
            counts.update(name for run_id, name in rows.iterator() if run_id not in ids)
            continue
        for row in prunable(expired).values("workflow_name").annotate(n=Count("id")):
            counts[row["workflow_name"]] += row["n"]
        if any(other.retention is None for other in classes):
            ids.update(prunable(expired).values_list("id", flat=True))
    return counts


def delete_batch(backend: Backend, expired: Expired, limit: int) -> Counter[str]:
    """Delete up to ``limit`` runs of the class, with everything of theirs, in one transaction; per workflow."""

    def batch() -> Counter[str]:
        with backend.write_lock(), transaction.atomic(using=backend.alias):
            chosen = backend.lock_skipping_locked(prunable(expired).order_by("finished_at"))
            rows = list(chosen.values_list("id", "workflow_name")[:limit])
            if rows:
                delete_runs([run_id for run_id, _ in rows])
            return Counter(name for _, name in rows)

    return backend.retrying(batch)


def delete_runs(ids: list[Any]) -> None:
    """Inside a transaction: delete these runs, their journals, signals, approvals, published values, stream
    chunks and attributes.

    Links to them from other rows are cleared. Twelve statements whatever the
    number of runs. The order lets databases that check foreign keys at once
    (MySQL, MariaDB) accept each statement. With ``PAYLOAD_OFFLOAD`` set, the
    files their rows reference are deleted once the transaction commits
    (``store/payload_files.py``): one statement more per payload column. So
    are the files uploaded to their human tasks (``task_files.py``): one
    statement more.
    """
    if payload_files.managed():
        payload_files.delete_on_commit(payload_files.references_of_runs(ids), WorkflowRun.objects.db)
    payload_files.delete_task_files_on_commit(ids, WorkflowRun.objects.db)  # before the approvals go
    attempts = StepAttempt.objects.filter(workflow_run_id__in=ids).values("id")
    # A successor outlives the run it continued; a child outlives its finished parent.
    WorkflowRun.objects.filter(continued_from_id__in=ids).update(continued_from=None)
    WorkflowRun.objects.filter(rerun_of_id__in=ids).update(rerun_of=None)  # a re-run outlives the run it re-ran
    WorkflowRun.objects.filter(parent_step_attempt_id__in=attempts).update(parent_step_attempt=None)
    # A parent (with a longer retention) keeps its journal entry for the child, without the link.
    StepAttempt.objects.filter(child_workflow_run_id__in=ids).update(child_workflow_run=None)
    Signal.objects.filter(workflow_run_id__in=ids)._raw_delete(Signal.objects.db)
    PublishedValue.objects.filter(workflow_run_id__in=ids)._raw_delete(PublishedValue.objects.db)
    StreamChunk.objects.filter(workflow_run_id__in=ids)._raw_delete(StreamChunk.objects.db)
    RunAttribute.objects.filter(workflow_run_id__in=ids)._raw_delete(RunAttribute.objects.db)
    Approval.objects.filter(workflow_run_id__in=ids)._raw_delete(Approval.objects.db)  # before their waits
    Signal.objects.filter(consumed_by_id__in=attempts).update(consumed_by=None)
    StepAttempt.objects.filter(workflow_run_id__in=ids)._raw_delete(StepAttempt.objects.db)
    WorkflowRun.objects.filter(id__in=ids)._raw_delete(WorkflowRun.objects.db)


def delete_events(backend: Backend, before: datetime, limit: int) -> int:
    """Delete up to ``limit`` events recorded before ``before``, oldest first; how many."""

    def batch() -> int:
        with backend.write_lock(), transaction.atomic(using=backend.alias):
            old = backend.lock_skipping_locked(Event.objects.filter(created_at__lt=before).order_by("id"))
            ids = list(old.values_list("id", flat=True)[:limit])
            if ids and payload_files.managed():
                found = payload_files.references(Event.objects.filter(id__in=ids), "payload")
                payload_files.delete_on_commit(found, backend.alias)
            if ids:
                Event.objects.filter(id__in=ids)._raw_delete(Event.objects.db)
            return len(ids)

    return backend.retrying(batch)


def batches(
    backend: Backend, classes: list[Expired], limit: int, stop: Callable[[], bool] = lambda: False
) -> Iterator[Counter[str]]:
    """Delete every expired run of ``classes``, one batch (transaction) at a time; yields each batch's counts."""
    for expired in classes:
        empty = 0
        while not stop():
            deleted = delete_batch(backend, expired, limit)
            if not deleted:
                # SKIP LOCKED passes over rows other transactions happen to lock, and on
                # MariaDB beside a busy claim loop a whole batch can come back empty while
                # runs are left: a plain read says whether to look again.
                empty += 1
                if empty > EMPTY_RETRIES or not prunable(expired).exists():
                    break
                time.sleep(PAUSE * empty)
                continue
            empty = 0
            yield deleted
            # Locks are not fair (SQLite's write lock, this process's): a breath
            # between batches lets waiting claims in before the next one.
            time.sleep(PAUSE)


def count_events(before: datetime) -> int:
    """How many events were recorded before ``before`` (``prune --dry-run``)."""
    return int(Event.objects.filter(created_at__lt=before).count())
