"""The journal: a run's history, and the fenced writes a worker makes while it holds the run.

The operations the engine calls are named for what they do to the run
(record a step, park, complete, fail, reschedule); each is one fenced
transaction (``fence.py``) and raises :class:`StoreUnavailable` instead of
a database error, so user code cannot swallow it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from .. import tracing
from ..models import StepAttempt, WorkflowRun
from ..states import RunStatus
from .fairness import place_of
from .fence import FenceOps, engine_op
from .records import (
    AttemptRecord,
    ChildStart,
    ClaimedRun,
    Fence,
    LeaseLost,
    NewAttempt,
    RunOutcome,
)

logger = logging.getLogger("django_openworkflow.store")


ATTEMPT_RECORD_FIELDS = ("id", "step_name", "kind", "status", "output", "error", "context", "child_workflow_run_id")


class JournalOps(FenceOps):
    """Reading a run's history and writing its steps and outcome, fenced on the worker that holds it."""

    @engine_op
    def load_history(self, run_id: Any) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first, in one query."""
        rows = StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id").values_list(*ATTEMPT_RECORD_FIELDS)
        return [AttemptRecord(*row) for row in rows]

    # -- fenced writes, by intent --

    @engine_op
    def record_step(self, fence: Fence, attempt: NewAttempt) -> int:
        """Commit the fence's ``pending`` and record that a step started; returns the new attempt's id."""
        new_id = self._commit(fence, insert=attempt)
        assert new_id is not None
        return new_id

    @engine_op
    def record_steps(self, fence: Fence, attempts: list[NewAttempt]) -> list[int]:
        """Commit the fence's ``pending`` and record that several steps (a parallel group) started; their ids."""
        self._commit(fence, inserts=attempts)
        ids = [attempt.id for attempt in attempts if attempt.id is not None]
        assert len(ids) == len(attempts), "every inserted attempt has its id"
        return ids

    @engine_op
    def flush(self, fence: Fence) -> None:
        """Commit ``pending`` alone: parallel steps that finished while others still run, or children's starts."""
        self._commit(fence)

    @engine_op
    def park(
        self,
        fence: Fence,
        until: datetime,
        *,
        attempt: NewAttempt | None = None,
        child: ChildStart | None = None,
        wake_if_child_done: list[Any] | None = None,
        wake_on_attempt: int | None = None,
        note: dict[str, Any] | None = None,
    ) -> None:
        """Let go of the run until ``until``: a sleep, a wait for a child, or a step's retry backoff.

        ``attempt`` records the step that parks (a sleep or a wait);
        ``child`` starts a child run linked to it, in the same transaction.
        A parent that parks on ``wake_if_child_done`` (child run ids) is due
        at once if one of those children has already finished. ``wake_on_attempt`` (a child's step
        attempt) lets only that child's end wake the run early, so a parent
        waiting for 300 children is not woken 300 times; without it, any
        child's end does. ``note`` (a step's retry backoff: its error) is kept
        as the run's ``error`` until the run executes again.
        """
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "wake_on_attempt_id": wake_on_attempt}
        if note is not None:
            fields["error"] = note
        self._commit(
            fence, insert=attempt, run_fields=fields, start_child=child, wake_when_child_done=wake_if_child_done
        )

    @engine_op
    def complete_run(
        self, fence: Fence, output: Any, parent_step_id: int | None, *, close_children: bool = False
    ) -> None:
        """The run returned ``output``: finish it and wake a parent waiting on it.

        ``close_children`` (the run started children with a parent-close
        policy: ``RunRecord.closes_children``) applies it in the same
        transaction; without, a run's completion costs no extra statement.
        """
        fields = {"status": RunStatus.COMPLETED, "output": output, "error": None, "finished_at": fence.now}
        self._commit(fence, run_fields=fields, wake_parent_of=parent_step_id, close_children=close_children)

    @engine_op
    def fail_run(
        self, fence: Fence, error: dict[str, Any], parent_step_id: int | None, attempts: int | None = None
    ) -> None:
        """Fail the run for good with ``error``, close its children by their policy, wake a parent waiting on it."""
        fields: dict[str, Any] = {"status": RunStatus.FAILED, "error": error, "finished_at": fence.now}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(fence, run_fields=fields, wake_parent_of=parent_step_id, ended_badly=True, close_children=True)

    @engine_op
    def cancel_held(self, fence: Fence, error: dict[str, Any], parent_step_id: int | None) -> None:
        """End a run whose cancel was requested, its compensations done; close its open steps and its children
        (by their parent-close policy), wake a parent; a deadlock's victim is written again (see ``_commit``)."""

        run_id, now = fence.run_id, fence.now

        def write() -> None:
            with self.write_lock(), transaction.atomic(using=self.alias):
                fields = {"status": RunStatus.CANCELED, "error": error, "finished_at": now}
                self._fence(fence, fields)
                self._flush(run_id, fence.pending, now)
                self._close_open_steps([run_id], now)
                self.close_children([run_id], now)
                if parent_step_id is not None:
                    self.wake_parent(parent_step_id, now, ended_badly=True)

        self.retrying(write)

    @engine_op
    def is_canceled(self, run_id: Any) -> bool:
        """Whether the run was canceled, is being canceled (compensating), or is gone."""
        row = WorkflowRun.objects.filter(id=run_id).values_list("status", "cancel_requested_at").first()
        return row is None or row[0] == RunStatus.CANCELED or row[1] is not None

    @engine_op
    def reschedule_run(self, fence: Fence, until: datetime, error: dict[str, Any], attempts: int | None = None) -> None:
        """Run the workflow again from the top at ``until``, keeping ``error`` as the reason.

        For a workflow-level retry (``attempts`` is the new count) and for a
        run this worker has no code for.
        """
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "error": error}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(fence, run_fields=fields)

    @engine_op
    def clear_error(self, fence: Fence) -> None:
        """Drop a note the run carried from an earlier slice (it is executing again)."""
        self._commit(fence, run_fields={"error": None})

    def release(
        self, claimed: ClaimedRun, retry_in: timedelta = timedelta(seconds=1), error: dict[str, Any] | None = None
    ) -> bool:
        """Hand a held run back after an error, so it is retried after ``retry_in`` rather than after its lease.

        ``error`` is kept on the run as a note for people and for the next
        slice. False when that failed too (the database is still away): the
        lease expires instead, and nothing is lost either way.
        """
        try:
            now = self.now()
            fields: dict[str, Any] = {"worker_id": None, "available_at": now + retry_in}
            if error is not None:
                fields["error"] = error
            self._commit(Fence(claimed.run.id, claimed.worker_id, now), run_fields=fields)
        except (Exception, LeaseLost):
            logger.debug("could not release run %s", claimed.run.id, exc_info=True)
            return False
        return True

    # -- reads the engine makes --

    @engine_op
    def run_outcome(self, run_id: Any) -> RunOutcome | None:
        """A run's status, output and error (None if the row is gone)."""
        row = WorkflowRun.objects.filter(id=run_id).values_list("status", "output", "error", "finished_at").first()
        return RunOutcome(*row) if row is not None else None

    @engine_op
    def run_outcomes(self, run_ids: list[Any]) -> dict[Any, RunOutcome]:
        """The status, output and error of several runs, by id, in one query (missing rows are left out)."""
        rows = WorkflowRun.objects.filter(id__in=run_ids).values_list("id", "status", "output", "error", "finished_at")
        return {run_id: RunOutcome(status, output, error, finished) for run_id, status, output, error, finished in rows}

    @engine_op
    def successor_id(self, run_id: Any) -> Any:
        """The id of the run this one continued as (``ctx.continue_as_new``), or None."""
        return WorkflowRun.objects.filter(continued_from_id=run_id).values_list("id", flat=True).first()

    @engine_op
    def idempotency_key(self, run_id: Any) -> str | None:
        """The key the run was started with (a schedule's run: its tick), or None."""
        key: str | None = WorkflowRun.objects.filter(id=run_id).values_list("idempotency_key", flat=True).first()
        return key

    @engine_op
    def continue_as_new(self, fence: Fence, *, input: Any, version: str | None, flow: dict[str, Any]) -> Any:
        """End the run as ``continued`` and start its successor with ``input``, in one transaction.

        The successor keeps the run's deadline, its retention, its subject and its place under a
        parent: a parent waiting on the run now waits on the successor. It
        keeps the run's children too: those with a parent-close policy are
        closed when the successor (or the last run of the chain) ends.
        Returns the successor's id.
        """
        run_id, now = fence.run_id, fence.now
        with self._keeping_completions(fence), self.write_lock(), transaction.atomic(using=self.alias):
            fields = {"status": RunStatus.CONTINUED, "output": None, "error": None, "finished_at": now}
            self._fence(fence, fields)
            self._flush(run_id, fence.pending, now)
            name, deadline, parent_step, retention, policy, closes_with, closes_children, subject_type, subject_id = (
                WorkflowRun.objects.filter(id=run_id)
                .values_list(
                    "workflow_name",
                    "deadline_at",
                    "parent_step_attempt_id",
                    "retention",
                    "parent_close_policy",
                    "closes_with",
                    "closes_children",
                    "subject_type",
                    "subject_id",
                )
                .get()
            )
            # The run's unfinished children with a policy are closed by the successor's end from now on.
            successor_id = uuid.uuid4()
            moved = WorkflowRun.objects.claimable().filter(closes_with=run_id).update(closes_with=successor_id)
            successor = WorkflowRun.objects.create(
                id=successor_id,
                trace_context=tracing.current_context(),
                workflow_name=name,
                version=version,
                input=input,
                available_at=now,
                deadline_at=deadline,
                parent_step_attempt_id=parent_step,
                continued_from_id=run_id,
                parent_close_policy=policy,
                closes_with=closes_with,
                closes_children=closes_children or bool(moved),
                fair_at=place_of(flow.get("fairness_key"), now),
                subject_type=subject_type,  # ... and the same subject
                subject_id=subject_id,
                **{**flow, "retention": retention},  # the successor is the same logical run: same retention
            )
            if parent_step is not None:
                StepAttempt.objects.filter(id=parent_step).update(child_workflow_run=successor)
            return successor.id

    def holds_lease(self, run_id: Any, worker_id: str) -> bool:
        """Whether ``worker_id`` holds the run and its lease has not run out by the database's clock.

        One query, for step code (``ctx.lease_held(check=True)``): a database
        error is raised as it is, the step's own.
        """
        held = WorkflowRun.objects.held().filter(id=run_id, worker_id=worker_id, available_at__gt=self.now_expr())
        return held.exists()

    @engine_op
    def run_status(self, run_id: Any) -> str | None:
        """The run's current status (None if the row is gone)."""
        return WorkflowRun.objects.filter(id=run_id).values_list("status", flat=True).first()
