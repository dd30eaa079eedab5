"""The writes that wait or run user code: signal and event waits, and atomic steps.

Each starts with the fence (``fence.py``) like every journal write. An
atomic step runs the step's own code inside the fenced transaction, so its
writes to the workflow database commit with the step's completion or not at
all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connections, transaction

from ..errors import StepUsageError
from ..models import Approval, ApprovalStatus, Signal, StepAttempt, WorkflowRun
from ..states import StepStatus
from .approvals import ApprovalOps
from .fence import engine_op
from .records import (
    DeliveredSignal,
    Fence,
    NewApproval,
    NewAttempt,
    StoreUnavailable,
)


class WaitOps(ApprovalOps):
    """Signal and event waits, and atomic steps."""

    # -- signal and event waits --

    @engine_op
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
        """One fenced transaction for a signal or event wait; returns (new attempt id, consumed signal).

        Flushes the fence's ``pending`` and records a new wait (``insert``). A new signal
        wait takes the oldest buffered signal of its name: the wait completes
        now and the run does not park. Otherwise the run parks until
        ``park_until`` — unless a sender completed the wait meanwhile, in which
        case it is due at once. Senders lock the run row, and so does the fence
        here, so each delivery is seen by one side or the other. A new wait
        for an approval writes its ``approval`` row too (``approvals.py``).
        """
        run_id, now = fence.run_id, fence.now
        with self._keeping_completions(fence), self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(fence, {})
            if event_type is not None:
                self.lock_event_type(event_type)
            self._flush(run_id, fence.pending, now)
            attempt_id = waiting_attempt_id
            if insert is not None:
                attempt_id = self._insert_attempt(run_id, insert, now).id
                if approval is not None:
                    self._open_approval(run_id, attempt_id, insert.step_name, approval, now)
                if signal_name is not None:
                    signal = self._consume_signal(run_id, signal_name, attempt_id, now)
                    if signal is not None:
                        StepAttempt.objects.filter(id=attempt_id).update(
                            status=StepStatus.COMPLETED,
                            output={"signal_id": signal.id, "data": signal.data},
                            finished_at=now,
                        )
                        return attempt_id, signal
            assert attempt_id is not None, "a wait to record or to re-arm"
            delivered = StepAttempt.objects.filter(id=attempt_id).exclude(status=StepStatus.RUNNING).exists()
            WorkflowRun.objects.filter(id=run_id).update(worker_id=None, available_at=now if delivered else park_until)
            return (attempt_id if insert is not None else None), None

    def _consume_signal(self, run_id: Any, name: str, attempt_id: int, now: datetime) -> DeliveredSignal | None:
        """Inside a worker's fenced transaction: take the oldest buffered signal for a new wait."""
        row = (
            Signal.objects.filter(workflow_run_id=run_id, name=name, consumed_by__isnull=True)
            .order_by("id")
            .values_list("id", "data")
            .first()
        )
        if row is None:
            return None
        Signal.objects.filter(id=row[0]).update(consumed_by_id=attempt_id, consumed_at=now)
        return DeliveredSignal(*row)

    @engine_op
    def expire_wait(self, fence: Fence, *, attempt_id: int) -> Any:
        """Time out an open wait, fenced; returns None, or the output a sender delivered just before.

        The timeout is journaled (output ``{"timed_out": true}``), so a replay
        returns ``None`` again and a late signal stays buffered; an approval
        of the wait becomes ``timed_out``.
        """
        with self.write_lock(), transaction.atomic(using=self.alias):
            self._fence(fence, {})
            self._flush(fence.run_id, fence.pending, fence.now)
            expired = StepAttempt.objects.filter(id=attempt_id, status=StepStatus.RUNNING).update(
                status=StepStatus.COMPLETED, output={"timed_out": True}, finished_at=fence.now
            )
            if expired:
                Approval.objects.filter(attempt_id=attempt_id, status=ApprovalStatus.OPEN).update(
                    status=ApprovalStatus.TIMED_OUT
                )
                return None
            return StepAttempt.objects.filter(id=attempt_id).values_list("output", flat=True).first()

    # -- atomic steps --

    @contextmanager
    def atomic_step(self, fence: Callable[[], Fence]) -> Iterator[Callable[[NewAttempt], None]]:
        """A transaction around a step's own code; yields ``record(attempt)`` for its journal entry.

        ``fence()`` makes the write's fence once the step's code has returned,
        so the entry is written at that time. The fence is checked last, just
        before commit, so the run row is locked only briefly (heartbeats are
        not held up by a long step), and a worker that lost its lease
        meanwhile rolls back the step's writes with it.
        Writes to other database aliases are refused: they could not commit
        with the journal. An error of the step's own code propagates as it
        is; one of the journal's write or of the commit becomes
        :class:`StoreUnavailable`.
        """
        records: list[NewAttempt] = []
        in_step = False
        try:
            with ExitStack() as stack:
                stack.enter_context(self.write_lock())
                stack.enter_context(transaction.atomic(using=self.alias))
                for other in connections:
                    if other != self.alias:
                        stack.enter_context(connections[other].execute_wrapper(_refuse_writes(other, self.alias)))
                in_step = True
                yield records.append
                in_step = False
                held = fence()
                self._fence(held, {})
                self._flush(held.run_id, held.pending, held.now)
                for new in records:
                    self._insert_attempt(held.run_id, new, held.now)
        except DatabaseError as exc:
            if in_step:
                raise  # the step's own code failed: its writes are rolled back
            raise StoreUnavailable(str(exc)) from exc


def _refuse_writes(other: str, using: str) -> Callable[..., Any]:
    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if verb not in ("SELECT", "SHOW", "EXPLAIN", "SET"):
            raise StepUsageError(
                f"an atomic step wrote to database {other!r}, but only writes to {using!r} (the workflow "
                "database) commit with the journal; write to it, or use a step without atomic=True"
            )
        return execute(sql, params, many, context)

    return wrapper
