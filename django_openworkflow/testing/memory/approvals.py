"""The in-memory backend's approvals and tasks (``store/approvals.py``): opened with their wait, decided once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ...errors import ApprovalClosed, ApprovalNotFound
from ...store.approvals import apply_claim, claimed_error, closed_error, closing_entry, due_timers, sign_off
from ...store.records import ApprovalRecord, FiredTimer, NewApproval
from .messages import MessageOps
from .rows import ApprovalRow, SignalRow, _read, _stored

OPEN = "open"  # ApprovalStatus's values: this backend does not import the models


class ApprovalOps(MessageOps):
    """Approvals: the row a wait opens, reads, and the first decision delivered (``ApprovalOps`` of the store)."""

    def _open_approval(self, run_id: Any, attempt_id: int, key: str, approval: NewApproval, now: datetime) -> int:
        """Inside the wait's operation (the lock held): the approval row of a new wait."""
        row = ApprovalRow(
            id=next(self._approval_ids),
            workflow_run_id=run_id,
            attempt_id=attempt_id,
            step_key=key,
            name=approval.name,
            details=approval.details,
            assignees=_stored(approval.assignees),
            created_at=now,
            timeout_at=approval.timeout_at,
            form=approval.form,
            form_fields=dict(approval.form_fields),
            initial=_stored(approval.initial),
            due_at=approval.due_at,
            required=approval.required,
            excluded=list(approval.excluded),
            remind_every=approval.remind_every,
            next_remind_at=None if approval.remind_every is None else now + approval.remind_every,
            escalate_at=approval.escalate_at,
            escalate_to=_stored(approval.escalate_to),
        )
        self.approvals[row.id] = row
        return row.id

    def approval(self, approval_id: int) -> ApprovalRecord | None:
        """The approval or task with this id, or None."""
        with self.lock:
            row = self.approvals.get(approval_id)
            return None if row is None else _record(row)

    def run_approvals(self, run_id: Any) -> list[ApprovalRecord]:
        """The approvals and tasks a run opened, oldest first."""
        with self.lock:
            return [_record(row) for row in self.approvals.values() if row.workflow_run_id == run_id]

    def decide_approval(self, approval_id: int, approved: bool, by: str, comment: str) -> dict[str, Any]:
        """Decide an open approval and deliver the decision (see the store's ``decide_approval``)."""
        status = "approved" if approved else "rejected"
        return self._close(approval_id, status, by, {"approved": bool(approved), "comment": comment})

    def submit_task(self, approval_id: int, by: str, data: dict[str, Any]) -> dict[str, Any]:
        """Close an open task with its form's data and deliver it (see the store's ``submit_task``)."""
        return self._close(approval_id, "submitted", by, {"data": data})

    def _close(self, approval_id: int, status: str, by: str, fields: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            row = self.approvals.get(approval_id)
            if row is None:
                raise ApprovalNotFound(f"no approval with id {approval_id}")
            what = f"{'task' if row.form else 'approval'} {approval_id}"
            now = self.now()
            if row.timeout_at <= now:
                raise ApprovalClosed(f"{what} timed out; it can no longer be decided")
            if row.status != OPEN:
                raise closed_error(approval_id, row.status, row.decided_by, row.decided_at, row.form)
            if row.claimed_by and row.claimed_by != by:
                raise claimed_error(approval_id, row.claimed_by, row.form, "decide")
            delivered, signoffs = {**fields, "by": by, "at": now.isoformat()}, row.signoffs
            if not row.form:
                signoffs, delivered = sign_off(approval_id, row.excluded, signoffs, row.required, delivered)
            run = self.runs.get(row.workflow_run_id)
            if run is None or run.is_finished:
                raise ApprovalClosed(f"{what} cannot be decided: its run is {run.status if run else 'deleted'}")
            delivered = _stored(delivered)
            entry = closing_entry(status, by, now, bool(delivered.get("remaining")))
            if delivered.get("remaining"):
                row.signoffs, row.activity = _stored(signoffs), [*row.activity, entry]
                return _read(delivered)
            wait = self.attempts.get(row.attempt_id)
            if wait is None or wait.status != "running":
                raise ApprovalClosed(f"{what} cannot be decided: its wait has ended")
            key = f"approval:{approval_id}"
            signal = SignalRow(next(self._signal_ids), row.workflow_run_id, key, delivered, key, now, wait.id, now)
            self.signals[signal.id] = signal
            self._deliver(wait, {"signal_id": signal.id, "data": delivered}, now)
            row.status, row.decided_by, row.decided_at = status, by, now
            row.comment, row.signoffs = fields.get("comment", ""), _stored(signoffs)
            row.activity = [*row.activity, entry]
            return _read(delivered)

    def change_claim(self, approval_id: int, action: str, by: str, to: str = "", force: bool = False) -> ApprovalRecord:
        """Claim, release or reassign an open approval (see the store's ``change_claim``); the record after."""
        with self.lock:
            row = self.approvals.get(approval_id)
            if row is None:
                raise ApprovalNotFound(f"no approval with id {approval_id}")
            run = self.runs.get(row.workflow_run_id)
            if run is None or run.is_finished:
                what = f"{'task' if row.form else 'approval'} {approval_id}"
                raise ApprovalClosed(f"{what} cannot be claimed: its run is {run.status if run else 'deleted'}")
            apply_claim(row, action, by, self.now(), to, force)
            return _record(row)

    def fire_task_timers(self, limit: int = 100) -> list[FiredTimer]:
        """Fire the reminders and escalations due now (see the store's ``fire_task_timers``)."""
        fired: list[FiredTimer] = []
        with self.lock:
            now = self.now()
            for row in list(self.approvals.values()):
                if row.status != OPEN or row.timeout_at <= now:
                    continue
                run = self.runs.get(row.workflow_run_id)
                if run is None or run.is_finished:
                    continue
                for reason, notify in due_timers(row, now):
                    fired.append(FiredTimer(_record(row), run.workflow_name, reason, _read(notify)))
                if len(fired) >= limit:
                    break
        return fired


def _record(row: ApprovalRow) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        run_id=row.workflow_run_id,
        step_key=row.step_key,
        name=row.name,
        details=row.details,
        assignees=_read(row.assignees),
        status=row.status,
        created_at=row.created_at,
        timeout_at=row.timeout_at,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        form=row.form,
        form_fields=dict(row.form_fields),
        initial=_read(row.initial),
        due_at=row.due_at,
        required=row.required,
        excluded=list(row.excluded),
        signoffs=_read(row.signoffs),
        claimed_by=row.claimed_by,
        claimed_at=row.claimed_at,
        activity=_read(row.activity),
        escalate_at=row.escalate_at,
        escalate_to=_read(row.escalate_to),
        escalated_at=row.escalated_at,
    )
