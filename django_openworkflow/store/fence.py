"""The fence every journal write goes through, and the building blocks of its transactions.

Every write goes through :meth:`FenceOps._commit` (or, for waits and atomic
steps, a transaction that starts the same way, ``_fence``): one short
transaction that first re-checks that this worker still holds the run
(``worker_id`` and status ``running``). A worker that lost its lease, or
whose run was canceled, gets :class:`LeaseLost` and writes nothing.

A write that would start something new or end the run is refused the same
way when someone asked to cancel the run after its compensations
(``cancel_requested_at``, ``compensate_on_cancel``): it writes only the
completions it carries and raises :class:`CancelRequested`. The fence's
own UPDATE asks, so a step boundary costs no extra statement; however
short the step that ran meanwhile, no request is missed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from typing import Any, NoReturn, ParamSpec, TypeVar

from django.db import DatabaseError, transaction
from django.db.models import Q

from .. import tracing
from ..definitions.children import ParentClosePolicy
from ..models import StepAttempt, WorkflowRun
from ..states import RunStatus, StepStatus
from .attributes import write_attributes
from .core import BackendCore
from .fairness import place_of, place_runs
from .progress import write_progress
from .records import (
    AttemptUpdate,
    AttributeWrite,
    CancelRequested,
    ChildStart,
    Fence,
    LeaseLost,
    NewAttempt,
    Pending,
    ProgressWrite,
    StoreUnavailable,
)

PARENT_CLOSED = {
    "type": "Canceled",
    "message": "canceled because its parent run ended (parent-close policy)",
    "retryable": False,
}
"""The error of a child canceled by its parent's end."""

P = ParamSpec("P")
T = TypeVar("T")


def engine_op(method: Callable[P, T]) -> Callable[P, T]:
    """An operation the engine calls: a database error becomes :class:`StoreUnavailable`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return method(*args, **kwargs)
        except DatabaseError as exc:
            raise StoreUnavailable(str(exc)) from exc

    return wrapper


class FenceOps(BackendCore):
    """The fenced transaction and its building blocks; the journal's writes are made of them."""

    def _commit(
        self,
        fence: Fence,
        *,
        insert: NewAttempt | None = None,
        inserts: list[NewAttempt] | None = None,
        run_fields: dict[str, Any] | None = None,
        start_child: ChildStart | None = None,
        wake_when_child_done: list[Any] | None = None,
        wake_parent_of: int | None = None,
        ended_badly: bool = False,
        close_children: bool = False,
    ) -> int | None:
        """Write the fence's ``pending``, new attempts and run fields in one fenced transaction.

        ``start_child`` inserts a child run linked to the new attempt, so the
        child exists exactly when the parent's wait step does (so do the
        ``child`` of pending new attempts: ``ctx.step.start_workflow``);
        ``inserts`` are more new attempts whose ids the caller wants back
        (filled in on each); ``wake_parent_of`` (the finishing run's parent
        step attempt) wakes a parent parked on that very step. Returns the
        inserted attempt's id. Raises :class:`LeaseLost` (after writing
        nothing) when the worker no longer holds the run, and, with the
        fence's ``unless_canceling``, :class:`CancelRequested` (after writing
        only the completions in ``pending``) when the run's cancel was requested.
        ``close_children`` (a write that ends the run) applies the parent-close
        policy of its unfinished children in the same transaction.
        """

        def write() -> int | None:
            with self._keeping_completions(fence):
                return self._commit_held(
                    fence,
                    insert=insert,
                    inserts=inserts,
                    run_fields=run_fields or {},
                    start_child=start_child,
                    wake_when_child_done=wake_when_child_done,
                    wake_parent_of=wake_parent_of,
                    ended_badly=ended_badly,
                    close_children=close_children,
                )

        if close_children or wake_parent_of is not None:
            # A run's end locks its row, then its children's (close_children); a child's end locks its
            # own, then its parent's (wake_parent). When a parent and a child end at once, the database
            # aborts one of the two: it is written again, whole (the aborted try wrote nothing).
            return self.retrying(write)
        return write()

    def _commit_held(
        self,
        fence: Fence,
        *,
        insert: NewAttempt | None,
        inserts: list[NewAttempt] | None,
        run_fields: dict[str, Any],
        start_child: ChildStart | None,
        wake_when_child_done: list[Any] | None,
        wake_parent_of: int | None,
        ended_badly: bool,
        close_children: bool,
    ) -> int | None:
        run_id, now, pending = fence.run_id, fence.now, fence.pending
        spawning = [c for c in pending if isinstance(c, NewAttempt) and c.child is not None]
        if not (spawning or inserts or start_child or wake_when_child_done or wake_parent_of or close_children):
            return self._step_boundary(fence, insert, run_fields)
        if start_child is not None and start_child.flow.get("closes_with") is not None:
            run_fields = {**run_fields, "closes_children": True}  # its end looks for its children (close_children)
        with self.write_lock(), transaction.atomic(using=self.alias):
            if spawning or inserts:
                plain = [c for c in pending if not (isinstance(c, NewAttempt) and c.child is not None)]
                self._step_boundary(replace(fence, pending=plain), None, run_fields)
                self._insert_attempts(run_id, [*spawning, *([insert] if insert else []), *(inserts or [])], now)
                new_id = insert.id if insert is not None else None
            else:
                new_id = self._step_boundary(fence, insert, run_fields)
            if close_children:
                self.close_children([run_id], now)
            if wake_parent_of is not None:
                self.wake_parent(wake_parent_of, now, ended_badly)
            if wake_when_child_done and WorkflowRun.objects.finished().filter(id__in=wake_when_child_done).exists():
                WorkflowRun.objects.filter(id=run_id).update(available_at=now)
            if start_child is not None:
                assert new_id is not None, "a child starts with the step that waits for it"
                child = WorkflowRun.objects.create(
                    trace_context=tracing.current_context(),
                    workflow_name=start_child.workflow_name,
                    version=start_child.version,
                    input=start_child.input,
                    available_at=now,
                    **start_child.flow,
                    fair_at=place_of(start_child.flow.get("fairness_key"), now),
                    parent_step_attempt_id=new_id,
                )
                StepAttempt.objects.filter(id=new_id).update(child_workflow_run=child)
            return new_id

    @contextmanager
    def _keeping_completions(self, fence: Fence) -> Iterator[None]:
        """Around a write refused for a cancel request: write the completions it carried, then re-raise.

        The steps that finished stay in the journal, so they are compensated;
        children not started yet (``start_workflow``) are dropped with the
        rest of what the write would have started. Fenced like any write.
        """
        try:
            yield
        except CancelRequested:
            if not fence.unless_canceling:  # pragma: no cover - only a write that asked is refused
                raise
            kept = [c for c in fence.pending if not (isinstance(c, NewAttempt) and c.child is not None)]
            with self.write_lock(), transaction.atomic(using=self.alias):
                self._fence(replace(fence, unless_canceling=False), {})
                self._flush(fence.run_id, kept, fence.now)
            raise

    def _step_boundary(self, fence: Fence, insert: NewAttempt | None, run_fields: dict[str, Any]) -> int | None:
        """The hot path of :meth:`_commit`: fence, pending changes and a new attempt, nothing else.

        Its own transaction (a savepoint inside :meth:`_commit`'s, for the
        rarer writes around children). A few statements here; a backend may
        do it in one.
        """
        with self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(fence, run_fields)
            self._flush(fence.run_id, fence.pending, fence.now)
            return self._insert_attempt(fence.run_id, insert, fence.now).id if insert is not None else None

    # -- building blocks, inside a transaction --

    def _fence(self, fence: Fence, run_fields: dict[str, Any]) -> None:
        """Lock the run row if this worker still holds it (and write ``run_fields``); else LeaseLost.

        With ``unless_canceling`` the same UPDATE also requires that nobody
        asked to cancel the run; when it matches nothing, :meth:`_refused`
        tells a cancel request (:class:`CancelRequested`) from a lost lease.
        """
        held = WorkflowRun.objects.held().filter(id=fence.run_id, worker_id=fence.worker_id)
        if fence.unless_canceling:
            held = held.filter(cancel_requested_at__isnull=True)
        if not held.update(updated_at=fence.now, **run_fields):
            self._refused(fence)

    def _refused(self, fence: Fence) -> NoReturn:
        """The fence matched nothing: raise :class:`CancelRequested` if this worker holds the run, else LeaseLost.

        Only when the fence asked about a cancel request. Inside a
        transaction the UPDATE's row lock keeps the answer true until it
        ends; in autocommit (PostgreSQL's one-statement step boundary) it may
        be stale at once, which is safe: the completions are written by
        :meth:`_keeping_completions`, fenced again.
        """
        held = WorkflowRun.objects.held().filter(id=fence.run_id, worker_id=fence.worker_id)
        if fence.unless_canceling and held.update(updated_at=fence.now):
            raise CancelRequested(fence.run_id)
        raise LeaseLost(fence.run_id)

    def _flush(self, run_id: Any, pending: Pending, now: datetime) -> None:
        spawning = []
        progress = []
        attributes = []
        for change in pending:
            if isinstance(change, ProgressWrite):
                progress.append(change)
            elif isinstance(change, AttributeWrite):
                attributes.append(change)
            elif not isinstance(change, NewAttempt):
                self._finish_attempt(change)
            elif change.child is not None:
                spawning.append(change)
            else:
                self._insert_attempt(run_id, change, now)
        if spawning:
            self._insert_attempts(run_id, spawning, now)
        if progress:
            write_progress(run_id, progress, now)
        if attributes:
            write_attributes(run_id, attributes)

    def _close_open_steps(self, run_ids: list[Any], now: datetime) -> None:
        """A canceled run's sleep, wait or executing step ends with it, so no step shows "running" forever."""
        StepAttempt.objects.filter(workflow_run_id__in=run_ids, status=StepStatus.RUNNING).update(
            status=StepStatus.FAILED, error={"type": "Canceled", "message": "the run was canceled"}, finished_at=now
        )

    def close_children(self, run_ids: list[Any], now: datetime) -> list[Any]:
        """Apply the parent-close policy of the unfinished children of runs that end now; the ids it canceled.

        Inside the transaction that ends the runs (their rows are locked or
        being written), one level of descendants per round: ``terminate``
        children are canceled (their open steps closed, like any cancel),
        and so, in the next round, are their own ``terminate`` children;
        ``request_cancel`` children that have started get their cancel
        requested (a worker runs their compensations; their own end closes
        their children), those never started are canceled at once.
        ``abandon`` children carry no ``closes_with`` and are never read.
        The children are read with a locking read, so one whose start
        committed just before is seen on every database. A child whose
        concurrency place is freed here wakes the run waiting for it at that
        run's next probe (``PROBE_INTERVAL``).
        """
        canceled = self._close_levels(list(run_ids), now)
        # A child that continued as new while a round above waited for its row handed its place to
        # a successor that round's statement could not see (PostgreSQL re-checks only the rows it
        # waited for): one more look, in a new statement, for children not closed yet.
        late = (
            WorkflowRun.objects.claimable()
            .filter(closes_with__in=[*run_ids, *canceled], cancel_requested_at__isnull=True)
            .values_list("closes_with", flat=True)
            .distinct()
        )
        closing = list(late)
        return canceled + (self._close_levels(closing, now) if closing else [])

    def _close_levels(self, closing: list[Any], now: datetime) -> list[Any]:
        """:meth:`close_children`'s rounds: the children of ``closing``, then theirs, ...; the ids canceled."""
        canceled: list[Any] = []
        while closing:
            rows = list(
                WorkflowRun.objects.claimable()
                .select_for_update()
                .filter(closes_with__in=closing)
                .values_list("id", "parent_close_policy", "started_at", "cancel_requested_at")
            )
            ask = [
                row[0]
                for row in rows
                if row[1] == ParentClosePolicy.REQUEST_CANCEL and row[2] is not None and row[3] is None
            ]
            ends = [
                row[0]
                for row in rows
                if row[1] == ParentClosePolicy.TERMINATE
                or (row[1] == ParentClosePolicy.REQUEST_CANCEL and row[2] is None)
            ]
            if ends:
                WorkflowRun.objects.filter(id__in=ends).update(
                    status=RunStatus.CANCELED, worker_id=None, finished_at=now, updated_at=now, error=PARENT_CLOSED
                )
                self._close_open_steps(ends, now)
            if ask:
                WorkflowRun.objects.filter(id__in=ask).update(cancel_requested_at=now, updated_at=now)
                WorkflowRun.objects.filter(id__in=ask, worker_id__isnull=True).update(available_at=now)
            canceled += ends
            closing = ends
        return canceled

    def _finish_attempt(self, change: AttemptUpdate) -> None:
        StepAttempt.objects.filter(id=change.attempt_id).update(
            status=change.status, output=change.output, error=change.error, finished_at=change.finished_at
        )

    def _insert_attempts(self, run_id: Any, news: list[NewAttempt], now: datetime) -> None:
        """Insert attempts in a few statements, fill in their ids, and start the children they carry."""
        rows = [self._attempt(run_id, new, now) for new in news]
        self.insert_with_ids(rows)
        for new, row in zip(news, rows, strict=True):
            new.id = row.id
        spawned = [new for new in news if new.child is not None]
        if not spawned:
            return
        children = []
        trace_context = tracing.current_context()  # the parent's slice: its children join its trace
        for new in spawned:
            start = new.child
            assert start is not None
            children.append(
                WorkflowRun(
                    trace_context=trace_context,
                    workflow_name=start.workflow_name,
                    version=start.version,
                    input=start.input,
                    available_at=now,
                    **start.flow,
                    parent_step_attempt_id=new.id,
                )
            )
            new.child_run_id = children[-1].id
        place_runs(children)  # in a fair queue: each child's place in line
        WorkflowRun.objects.bulk_create(children)
        if any(child.closes_with is not None for child in children):  # its end looks for them (close_children)
            WorkflowRun.objects.filter(id=run_id).update(closes_children=True)
        links = [StepAttempt(id=new.id, child_workflow_run_id=new.child_run_id) for new in spawned]
        StepAttempt.objects.bulk_update(links, ["child_workflow_run"])

    def _attempt(self, run_id: Any, new: NewAttempt, now: datetime) -> StepAttempt:
        return StepAttempt(
            workflow_run_id=run_id,
            step_name=new.step_name,
            kind=new.kind,
            status=new.status,
            started_at=new.started_at,
            context=new.context,
            output=new.output,
            error=new.error,
            finished_at=new.finished_at,
            created_at=now,
        )

    def _insert_attempt(self, run_id: Any, new: NewAttempt, now: datetime) -> StepAttempt:
        row = self._attempt(run_id, new, now)
        row.save(using=self.alias, force_insert=True)
        return row

    def wake_parent(self, parent_step_attempt_id: int, now: Any, ended_badly: bool = False) -> int:
        """Make a parent run due now if it is parked waiting on this step attempt.

        A parent that is executing (it holds its lease) is left alone: it will
        see the child's state when it next reads it. A parent watching one
        child of many (``wake_on_attempt_id``) is woken by that child, or by
        any child that failed or was canceled.

        A parent that is held may be parking at this very moment, its park
        not yet committed: an update skips such a row without waiting (its
        committed version is not parked), and the park's own check of the
        child ran before this child's end committed, so each would miss the
        other and the parent would sleep until its wait times out. So the
        parent's state is read first: a held parent's row is locked (which
        waits for a park in progress to commit) before the update; a parked
        parent that watches another child is left alone, without a write.
        Siblings finishing while their parent is parked take no lock, so
        they do not queue behind each other.
        """
        waiting = StepAttempt.objects.filter(id=parent_step_attempt_id, status=StepStatus.RUNNING)
        parent = WorkflowRun.objects.filter(id__in=waiting.values("workflow_run_id"))
        state = parent.values_list("worker_id", "status", "wake_on_attempt_id").first()
        if state is None:
            return 0
        worker_id, status, watched = state
        if worker_id is not None:
            list(parent.select_for_update().values_list("id", flat=True))
        elif status != RunStatus.RUNNING or not (ended_badly or watched in (None, parent_step_attempt_id)):
            return 0  # finished, pending, or parked watching another child: nothing to wake
        parents = parent.parked().filter(available_at__gt=now)
        if not ended_badly:  # a failed or canceled child wakes its parent even if it watches another
            parents = parents.filter(Q(wake_on_attempt_id__isnull=True) | Q(wake_on_attempt_id=parent_step_attempt_id))
        return parents.update(available_at=now)
