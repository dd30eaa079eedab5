"""The in-memory backend's journal: history, fenced writes, and the reads the engine makes (``store/journal.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...states import RunStatus, StepStatus
from ...store.records import (
    AttemptRecord,
    ChildStart,
    ClaimedRun,
    DeliveredSignal,
    Fence,
    LeaseLost,
    NewApproval,
    NewAttempt,
    RunOutcome,
)
from .core import MemoryCore
from .rows import RunRow, SignalRow, _Fenced, _read, _stored


class JournalOps(MemoryCore):
    """History and fenced journal writes."""

    if TYPE_CHECKING:  # from ApprovalOps (approvals.py), next to this class in the backend
        _open_approval: Callable[[Any, int, str, NewApproval, datetime], int]

    def load_history(self, run_id: Any) -> list[AttemptRecord]:
        """Every attempt of the run, oldest first."""
        with self.lock:
            return [a.record() for a in self.attempts.values() if a.workflow_run_id == run_id]

    def record_step(self, fence: Fence, attempt: NewAttempt) -> int:
        """Commit the fence's ``pending`` and record that a step started; returns the new attempt's id."""
        new_id = self._commit(fence, _Fenced(insert=attempt))
        assert new_id is not None
        return new_id

    def record_steps(self, fence: Fence, attempts: list[NewAttempt]) -> list[int]:
        """Commit the fence's ``pending`` and record that several steps started; returns their ids."""
        self._commit(fence, _Fenced(inserts=attempts))
        return [attempt.id for attempt in attempts if attempt.id is not None]

    def flush(self, fence: Fence) -> None:
        """Commit ``pending`` alone."""
        self._commit(fence, _Fenced())

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
        """Let go of the run until ``until`` (a sleep, a wait for children, a retry backoff)."""
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "wake_on_attempt_id": wake_on_attempt}
        if note is not None:
            fields["error"] = note
        fenced = _Fenced(
            insert=attempt,
            run_fields=fields,
            start_child=child,
            wake_when_child_done=wake_if_child_done,
        )
        self._commit(fence, fenced)

    def complete_run(
        self, fence: Fence, output: Any, parent_step_id: int | None, *, close_children: bool = False
    ) -> None:
        """The run returned ``output``: finish it, close its children by their policy, wake a parent waiting on it."""
        fields = {"status": RunStatus.COMPLETED, "output": _stored(output), "error": None, "finished_at": fence.now}
        self._commit(fence, _Fenced(run_fields=fields, wake_parent_of=parent_step_id, close_children=close_children))

    def fail_run(
        self, fence: Fence, error: dict[str, Any], parent_step_id: int | None, attempts: int | None = None
    ) -> None:
        """Fail the run for good with ``error`` and wake a parent waiting on it."""
        fields: dict[str, Any] = {"status": RunStatus.FAILED, "error": _stored(error), "finished_at": fence.now}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(
            fence, _Fenced(run_fields=fields, wake_parent_of=parent_step_id, ended_badly=True, close_children=True)
        )

    def cancel_held(self, fence: Fence, error: dict[str, Any], parent_step_id: int | None) -> None:
        """End a run whose cancel was requested, its compensations done; close its open steps, wake a parent."""
        run_id, now = fence.run_id, fence.now
        with self.lock:
            run = self._fence(fence)
            self._flush(run_id, fence.pending, now)
            self._update(run, now, status=RunStatus.CANCELED, error=_stored(error), finished_at=now)
            self._close_open_steps([run_id], now)
            self.close_children([run_id], now)
            if parent_step_id is not None:
                self.wake_parent(parent_step_id, now, ended_badly=True)

    def is_canceled(self, run_id: Any) -> bool:
        """Whether the run was canceled, is being canceled (compensating), or is gone."""
        with self.lock:
            run = self.runs.get(run_id)
            return run is None or run.status == RunStatus.CANCELED or run.cancel_requested_at is not None

    def reschedule_run(self, fence: Fence, until: datetime, error: dict[str, Any], attempts: int | None = None) -> None:
        """Run the workflow again from the top at ``until``, keeping ``error`` as the reason."""
        fields: dict[str, Any] = {"worker_id": None, "available_at": until, "error": _stored(error)}
        if attempts is not None:
            fields["attempts"] = attempts
        self._commit(fence, _Fenced(run_fields=fields))

    def clear_error(self, fence: Fence) -> None:
        """Drop a note the run carried from an earlier slice."""
        self._commit(fence, _Fenced(run_fields={"error": None}))

    def release(
        self, claimed: ClaimedRun, retry_in: timedelta = timedelta(seconds=1), error: dict[str, Any] | None = None
    ) -> bool:
        """Hand a held run back, due after ``retry_in``; False if this worker no longer holds it."""
        with self.lock:
            now = self.now()
            fields: dict[str, Any] = {"worker_id": None, "available_at": now + retry_in}
            if error is not None:
                fields["error"] = _stored(error)
            try:
                self._commit(Fence(claimed.run.id, claimed.worker_id, now), _Fenced(run_fields=fields))
            except LeaseLost:
                return False
            return True

    def wait_for_delivery(
        self,
        fence: Fence,
        *,
        park_until: datetime,
        insert: NewAttempt | None = None,
        waiting_attempt_id: int | None = None,
        signal_name: str | None = None,
        event_type: str | None = None,
        approval: NewApproval | None = None,
    ) -> tuple[int | None, DeliveredSignal | None]:
        """A signal or event wait: record it (a new signal wait takes the oldest buffered signal) or park.

        A new wait for an approval or a task writes its approval row too (``approvals.py``).
        """
        run_id, now = fence.run_id, fence.now
        with self.lock:
            run = self._fence_keeping_completions(fence)
            self._update(run, now)
            self._flush(run_id, fence.pending, now)
            attempt_id = waiting_attempt_id
            if insert is not None:
                attempt_id = self._insert_attempt(run_id, insert, now)
                if approval is not None:
                    self._open_approval(run_id, attempt_id, insert.step_name, approval, now)
                if signal_name is not None:
                    signal = self._consume_signal(run_id, signal_name, attempt_id, now)
                    if signal is not None:
                        taken = self.attempts[attempt_id]
                        taken.status, taken.finished_at = StepStatus.COMPLETED, now
                        taken.output = {"signal_id": signal.id, "data": _read(signal.data)}
                        return attempt_id, DeliveredSignal(signal.id, _read(signal.data))
            assert attempt_id is not None, "a wait to record or to re-arm"
            wait = self.attempts.get(attempt_id)
            delivered = wait is not None and wait.status != StepStatus.RUNNING
            run.worker_id, run.available_at = None, now if delivered else park_until
            return (attempt_id if insert is not None else None), None

    def _consume_signal(self, run_id: Any, name: str, attempt_id: int, now: datetime) -> SignalRow | None:
        """Take the oldest buffered signal of ``name`` for a new wait."""
        for signal in self.signals.values():
            if signal.workflow_run_id == run_id and signal.name == name and signal.consumed_by_id is None:
                signal.consumed_by_id, signal.consumed_at = attempt_id, now
                return signal
        return None

    def expire_wait(self, fence: Fence, *, attempt_id: int) -> Any:
        """Time out an open wait; returns None, or the output a sender delivered just before."""
        now = fence.now
        with self.lock:
            self._update(self._fence(fence), now)
            self._flush(fence.run_id, fence.pending, now)
            wait = self.attempts.get(attempt_id)
            if wait is None:
                return None
            if wait.status == StepStatus.RUNNING:
                wait.status, wait.output, wait.finished_at = StepStatus.COMPLETED, {"timed_out": True}, now
                for approval in self.approvals.values():
                    if approval.attempt_id == attempt_id and approval.status == "open":
                        approval.status = "timed_out"
                return None
            return _read(wait.output)

    @contextmanager
    def atomic_step(self, fence: Callable[[], Fence]) -> Iterator[Callable[[NewAttempt], None]]:
        """Around a step's own code: yields ``record(attempt)``; the journal entries are written after it, fenced.

        The step's code runs outside the lock; if it raises, nothing is written.
        ``fence()`` makes the write's fence once the code has returned.
        """
        records: list[NewAttempt] = []
        yield records.append
        with self.lock:
            held = fence()
            self._update(self._fence(held), held.now)
            self._flush(held.run_id, held.pending, held.now)
            for new in records:
                self._insert_attempt(held.run_id, new, held.now)

    # -- reads the engine makes --

    def run_outcome(self, run_id: Any) -> RunOutcome | None:
        """A run's status, output and error (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else self._outcome(run)

    def run_outcomes(self, run_ids: list[Any]) -> dict[Any, RunOutcome]:
        """The outcomes of several runs, by id (missing runs are left out)."""
        with self.lock:
            return {run_id: self._outcome(self.runs[run_id]) for run_id in run_ids if run_id in self.runs}

    @staticmethod
    def _outcome(run: RunRow) -> RunOutcome:
        return RunOutcome(str(run.status), _read(run.output), _read(run.error), run.finished_at)

    def successor_id(self, run_id: Any) -> Any:
        """The id of the run this one continued as, or None."""
        with self.lock:
            return next((run.id for run in self.runs.values() if run.continued_from_id == run_id), None)

    def idempotency_key(self, run_id: Any) -> str | None:
        """The key the run was started with (a schedule's run: its tick), or None."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else run.idempotency_key

    def continue_as_new(self, fence: Fence, *, input: Any, version: str | None, flow: dict[str, Any]) -> Any:
        """End the run as ``continued`` and start its successor with ``input``; returns the successor's id."""
        run_id, now = fence.run_id, fence.now
        with self.lock:
            run = self._fence_keeping_completions(fence)
            self._flush(run_id, fence.pending, now)
            self._update(run, now, status=RunStatus.CONTINUED, output=None, error=None, finished_at=now)
            successor = self._insert_run(
                {
                    "workflow_name": run.workflow_name,
                    "version": version,
                    "input": input,
                    "available_at": now,
                    "deadline_at": run.deadline_at,
                    "parent_step_attempt_id": run.parent_step_attempt_id,
                    "continued_from_id": run_id,
                    "parent_close_policy": run.parent_close_policy,
                    "closes_with": run.closes_with,
                    "closes_children": run.closes_children,
                    **flow,
                    "retention": run.retention,  # the successor is the same logical run: same retention
                    "subject_type": run.subject_type,  # ... and the same subject
                    "subject_id": run.subject_id,
                },
                now,
            )
            if run.parent_step_attempt_id in self.attempts:
                self.attempts[run.parent_step_attempt_id].child_workflow_run_id = successor.id
            for child in self.runs.values():  # its children with a policy are closed by the successor's end
                if child.closes_with == run_id and child.is_claimable:
                    child.closes_with, successor.closes_children = successor.id, True
            return successor.id

    def holds_lease(self, run_id: Any, worker_id: str) -> bool:
        """Whether ``worker_id`` holds the run and its lease has not run out."""
        with self.lock:
            run = self.runs.get(run_id)
            return run is not None and run.is_held and run.worker_id == worker_id and run.available_at > self.now()

    def run_status(self, run_id: Any) -> str | None:
        """The run's current status (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else str(run.status)
