"""What the engine, the slice runner and the approvals need of a store: protocols met by every backend.

The engine is handed its store (``execute_slice(store, claimed)``), and so
are the :class:`~django_openworkflow.worker.runner.SliceRunner` and the
:class:`~django_openworkflow.worker.runner.LeaseKeeper`. They are typed
with these protocols rather than with
:class:`~django_openworkflow.store.backends.base.Backend`, so that any
store with these operations will do: the database backends (subclasses of
``Backend``) and :class:`~django_openworkflow.testing.memory.InMemoryBackend`,
which keeps its rows in dicts and subclasses nothing. Each operation is
described where the database backends write it (``journal.py``, ``waits.py``,
``queue.py``, ``runs.py``, ``core.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any, Protocol

from .records import (
    ApprovalRecord,
    AttemptRecord,
    ChildStart,
    ClaimedRun,
    DeliveredSignal,
    Fence,
    FiredTimer,
    NewApproval,
    NewAttempt,
    RunOutcome,
)

__all__ = ["ApprovalStore", "EngineStore", "WorkerStore"]


class EngineStore(Protocol):
    """The operations the engine calls while it executes a slice of a run it holds.

    Every write takes a :class:`~.records.Fence` (the run's id, the worker
    id that claimed it, the engine's clock, the buffered attempt changes and
    whether a cancel request refuses the write), and is fenced: it raises
    :class:`~.records.LeaseLost` and writes nothing when the worker no
    longer holds the run. An atomic step takes a function that makes its
    fence when the step's code has returned, the moment its entry is written.
    """

    # -- the connection (no-ops for a store without one) --

    def close_connection(self) -> None: ...

    def close_thread_connections(self) -> None: ...

    def is_transient(self, error: BaseException | None) -> bool: ...

    # -- reading --

    def load_history(self, run_id: Any) -> list[AttemptRecord]: ...

    def holds_lease(self, run_id: Any, worker_id: str) -> bool: ...

    def is_canceled(self, run_id: Any) -> bool: ...

    def run_outcome(self, run_id: Any) -> RunOutcome | None: ...

    def run_outcomes(self, run_ids: list[Any]) -> dict[Any, RunOutcome]: ...

    def successor_id(self, run_id: Any) -> Any: ...

    def idempotency_key(self, run_id: Any) -> str | None: ...

    # -- fenced writes: each takes the run's Fence (who holds it, when, what is pending) first --

    def record_step(self, fence: Fence, attempt: NewAttempt) -> int: ...

    def record_steps(self, fence: Fence, attempts: list[NewAttempt]) -> list[int]: ...

    def flush(self, fence: Fence) -> None: ...

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
    ) -> None: ...

    def complete_run(
        self, fence: Fence, output: Any, parent_step_id: int | None, *, close_children: bool = False
    ) -> None: ...

    def fail_run(
        self, fence: Fence, error: dict[str, Any], parent_step_id: int | None, attempts: int | None = None
    ) -> None: ...

    def cancel_held(self, fence: Fence, error: dict[str, Any], parent_step_id: int | None) -> None: ...

    def reschedule_run(
        self, fence: Fence, until: datetime, error: dict[str, Any], attempts: int | None = None
    ) -> None: ...

    def clear_error(self, fence: Fence) -> None: ...

    def release(self, claimed: ClaimedRun, retry_in: timedelta = ..., error: dict[str, Any] | None = None) -> bool: ...

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
    ) -> tuple[int | None, DeliveredSignal | None]: ...

    def expire_wait(self, fence: Fence, *, attempt_id: int) -> Any: ...

    def atomic_step(self, fence: Callable[[], Fence]) -> AbstractContextManager[Callable[[NewAttempt], None]]: ...

    def continue_as_new(self, fence: Fence, *, input: Any, version: str | None, flow: dict[str, Any]) -> Any: ...


class WorkerStore(EngineStore, Protocol):
    """The engine's operations, and those the slice runner and the lease keeper add around a slice."""

    def extend_leases(self, worker_id: str, lease: timedelta, run_ids: list[Any]) -> int: ...

    def held_among(self, worker_id: str, run_ids: list[Any]) -> set[Any]: ...

    def cancel_requested_among(self, run_ids: list[Any]) -> set[Any]: ...

    def free_place(self, concurrency_key: str, *, skip_if_quiet: bool = False) -> tuple[Any, str] | None: ...


class ApprovalStore(Protocol):
    """What deciding an approval and submitting a task call (``client/approvals.py``, ``client/human_tasks.py``).

    A database backend, or the in-memory one of ``django_openworkflow.testing``
    (the test helpers ``decide`` and ``submit_task`` drive either).
    """

    def now(self) -> datetime: ...

    def approval(self, approval_id: int) -> ApprovalRecord | None: ...

    def run_approvals(self, run_id: Any) -> list[ApprovalRecord]: ...

    def decide_approval(self, approval_id: int, approved: bool, by: str, comment: str) -> dict[str, Any]: ...

    def submit_task(self, approval_id: int, by: str, data: dict[str, Any]) -> dict[str, Any]: ...

    def change_claim(
        self, approval_id: int, action: str, by: str, to: str = "", force: bool = False
    ) -> ApprovalRecord: ...

    def fire_task_timers(self, limit: int = 100) -> list[FiredTimer]: ...
