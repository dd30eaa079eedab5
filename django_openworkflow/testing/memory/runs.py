"""The in-memory backend's runs: starting, reading, canceling, waking, retrying (``store/runs.py``)."""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...states import RunStatus, StepKind, StepStatus
from ...store.records import (
    StartedRun,
)

if TYPE_CHECKING:
    pass
from .core import MemoryCore
from .rows import RunRow, _stored


class RunOps(MemoryCore):
    """Starts, reads, cancels, wakes and retries."""

    def insert_run(
        self,
        *,
        workflow_name: str,
        version: str | None,
        input: Any,
        available_at: datetime | None,
        deadline_at: datetime | None,
        idempotency_key: str | None,
        flow: dict[str, Any] | None = None,
        debounce: tuple[str, timedelta, timedelta | None] | None = None,
    ) -> tuple[StartedRun, bool]:
        """Insert a pending run; returns (run, created). A start with a key its workflow has returns that run."""
        row = dict(
            workflow_name=workflow_name,
            version=version,
            input=input,
            available_at=available_at,
            deadline_at=deadline_at,
            idempotency_key=idempotency_key,
            **(flow or {}),
        )
        with self.lock:
            now = self.now()
            if debounce is not None:
                return self._debounce(row, now, *debounce)
            existing = self._keyed(workflow_name, idempotency_key)
            if existing is not None:
                return StartedRun(existing.id, existing.queue), False
            run = self._insert_run(row, now)
            return StartedRun(run.id, run.queue), True

    def _keyed(self, workflow_name: str, idempotency_key: str | None) -> RunRow | None:
        if idempotency_key is None:
            return None
        keyed = (run for run in self.runs.values() if run.idempotency_key == idempotency_key)
        return next((run for run in keyed if run.workflow_name == workflow_name), None)

    def _debounce(
        self, row: dict[str, Any], now: datetime, key: str, delay: timedelta, max_delay: timedelta | None
    ) -> tuple[StartedRun, bool]:
        """Fold a start into the pending run with this debounce key, or create it."""
        for run in self.runs.values():
            if run.workflow_name == row["workflow_name"] and run.debounce_key == key and run.status == "pending":
                until = now + delay
                if max_delay is not None and run.created_at is not None:
                    until = min(until, run.created_at + max_delay)
                run.input, run.available_at, run.updated_at = _stored(row["input"]), until, now
                return StartedRun(run.id, run.queue), False
        run = self._insert_run({**row, "available_at": now + delay, "debounce_key": key}, now)
        return StartedRun(run.id, run.queue), True

    def insert_runs(self, runs: list[dict[str, Any]]) -> list[tuple[Any, bool]]:
        """Insert pending runs; ``(id, created)`` for each, in order (a key already taken: that run, False)."""
        with self.lock:
            now = self.now()
            results = []
            for fields in runs:
                existing = self._keyed(fields["workflow_name"], fields.get("idempotency_key"))
                if existing is not None:
                    results.append((existing.id, False))
                else:
                    results.append((self._insert_run({"status": RunStatus.PENDING, **fields}, now).id, True))
            return results

    def get_run(self, run_id: Any) -> RunRow | None:
        """A copy of the run's row, or None."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else copy.deepcopy(run)

    def parent_run_id(self, run_id: Any) -> Any:
        """The id of the run that started this one as a child, or None."""
        with self.lock:
            run = self.runs.get(run_id)
            return None if run is None else self._parent_id(run)

    def child_run_ids(self, run_id: Any) -> list[Any]:
        """The ids of the runs this one started as children, oldest first."""
        with self.lock:
            return [run.id for run in self.runs.values() if self._parent_id(run) == run_id]

    def cancel_run(self, run_id: Any) -> bool:
        """Cancel a run that has not finished; False if it already had."""
        return bool(self.cancel_runs([run_id]))

    def cancel_runs(self, run_ids: list[Any]) -> list[Any]:
        """Cancel many runs; their open steps close, waiting parents wake. Returns the ids it canceled."""
        with self.lock:
            now = self.now()
            targets = [run for run_id in run_ids if (run := self.runs.get(run_id)) is not None and run.is_claimable]
            for run in targets:
                self._update(run, now, status=RunStatus.CANCELED, worker_id=None, finished_at=now)
            self._close_open_steps([run.id for run in targets], now)
            self.close_children([run.id for run in targets], now)
            for run in targets:
                if run.parent_step_attempt_id is not None:
                    self.wake_parent(run.parent_step_attempt_id, now, ended_badly=True)
            # A canceled run may have held a place, or been the run asking for one for the others.
            for key in sorted({run.concurrency_key for run in targets if run.concurrency_key is not None}):
                self.free_place(key)
            return [run.id for run in targets]

    def request_cancel(self, run_ids: list[Any]) -> list[Any]:
        """Ask a worker to cancel these runs after their compensations; a run nobody holds is made due now."""
        with self.lock:
            now = self.now()
            asked = []
            for run_id in run_ids:
                run = self.runs.get(run_id)
                if run is None or not run.is_claimable or run.cancel_requested_at is not None:
                    continue
                self._update(run, now, cancel_requested_at=now)
                if run.worker_id is None:
                    run.status, run.available_at = RunStatus.RUNNING, now
                asked.append(run.id)
            return asked

    def free_place(self, concurrency_key: str, *, skip_if_quiet: bool = False) -> tuple[uuid.UUID, str] | None:
        """A run of this key let go of its place: make the first run waiting for one due now; its (id, queue)."""
        with self.lock:
            waiting = self._blocked(concurrency_key)
            if not waiting:
                return None
            first = min(waiting, key=lambda run: (-run.priority, run.blocked_at, run.created_at))
            first.available_at = self.now()
            return first.id, first.queue

    def wake_run(self, run_id: Any) -> bool:
        """ "Retry now" for one run."""
        return bool(self.wake_runs([run_id]))

    def wake_runs(self, run_ids: list[Any]) -> list[Any]:
        """Make parked, backing-off or scheduled runs due now (a sleep in progress ends now); the ids woken."""
        with self.lock:
            now = self.now()
            woken = []
            for run_id in run_ids:
                run = self.runs.get(run_id)
                if run is None or not run.is_claimable or run.worker_id is not None or run.available_at <= now:
                    continue
                self._update(run, now, available_at=now)
                woken.append(run.id)
            for attempt in self.attempts.values():
                if (
                    attempt.workflow_run_id in woken
                    and attempt.kind == StepKind.SLEEP
                    and attempt.status == StepStatus.RUNNING
                ):
                    attempt.context = {"resume_at": now.isoformat(), "woken_early": True}
            return woken

    def retry_failed_run(self, run_id: Any) -> bool:
        """Retry one failed run from its failed step."""
        return bool(self.retry_failed_runs([run_id]))

    def retry_failed_runs(self, run_ids: list[Any]) -> list[Any]:
        """Send failed runs back to pending for a new workflow-level attempt; the ids sent back."""
        with self.lock:
            now = self.now()
            failed = [run for run_id in run_ids if (run := self.runs.get(run_id)) and run.status == RunStatus.FAILED]
            for run in failed:
                self._update(
                    run,
                    now,
                    status=RunStatus.PENDING,
                    error=None,
                    finished_at=None,
                    worker_id=None,
                    available_at=now,
                )
            return [run.id for run in failed]
