"""Approvals and tasks: the row a ``ctx.wait_for_approval`` or ``ctx.wait_for_input`` writes with its wait,
and deciding or submitting it.

The wait is a signal wait (kind ``signal``, context ``{"approval": name}``)
that only a decision completes: ``send_signal`` does not reach it. The
approval row is written in the same fenced transaction as the wait
(``WaitOps.wait_for_delivery``), one per (run, step key); a timeout marks it
``timed_out`` in the transaction that journals the timeout
(``WaitOps.expire_wait``).

Deciding (:meth:`ApprovalOps.decide_approval`) or submitting a task's form
(:meth:`ApprovalOps.submit_task`) locks the run row, as a signal's sender
and the worker's fence do, then the approval row, then moves the row from
``open`` with a conditional ``UPDATE ... WHERE status = 'open'``: of two
concurrent decisions, the one whose update counts wins; the other is told
who won. The decision (or the form's data) is delivered as the wait's
signal in the same transaction. An approval that needs several people's
approvals records each as a sign-off under the same locks, so two
approvers at once are counted one after the other, and the decision is
delivered with the last one needed (or the first rejection). The users it
excludes are refused here, whoever calls.
Who may decide is resolved against ``django.contrib.auth`` when someone
decides (:func:`may_decide`): the assignees are stored as data.

Claiming, releasing and reassigning (:meth:`ApprovalOps.change_claim`) lock
the approval row alone and change it by :func:`apply_claim`, the rule every
backend shares; the close refuses anyone but the holder of a claimed task.
The task timers (reminders, escalation) are fired by :meth:`ApprovalOps.fire_task_timers`
under the same row lock, by :func:`due_timers`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from ..errors import ApprovalClosed, ApprovalNotAssigned, ApprovalNotFound, TaskClaimed
from ..models import Approval, ApprovalStatus, Signal, StepAttempt, WorkflowRun
from ..states import FINISHED_STATUSES
from .journal import JournalOps
from .records import ApprovalRecord, FiredTimer, NewApproval


def may_decide(user: Any, assignees: dict[str, list[str]]) -> bool:
    """Whether ``user`` (a ``django.contrib.auth`` user) may decide an approval with these assignees.

    An active superuser may decide every approval; otherwise the user is
    named in ``users`` (by username only: a username of digits must not pass
    for another user's primary key), belongs to a group named in ``groups``, or holds a permission named in
    ``permissions`` (``"app_label.codename"``, through Django's backends, so
    a group's permissions count).
    """
    return Decider(user).may(assignees)


class Decider:
    """:func:`may_decide` for one user over many approvals: the user's groups are read once (the Inbox).

    Confined to the request (or call) that made it: never shared between threads.
    """

    def __init__(self, user: Any) -> None:
        self.user = user
        self.active = user is not None and user.is_authenticated and user.is_active
        self.names = {user.get_username()} if self.active else set()
        self._groups: set[str] | None = None

    def may(self, assignees: dict[str, list[str]]) -> bool:
        if not self.active:
            return False
        if getattr(self.user, "is_superuser", False) or self.names & set(assignees.get("users", ())):
            return True
        groups = assignees.get("groups", ())
        if groups and hasattr(self.user, "groups"):  # a custom user model may have no groups
            if self._groups is None:
                self._groups = set(self.user.groups.values_list("name", flat=True))
            if self._groups & set(groups):
                return True
        # Django's backends cache the user's permissions on the user object after the first check.
        has_perm = getattr(self.user, "has_perm", None)  # a custom user model may have no permissions
        return has_perm is not None and any(has_perm(permission) for permission in assignees.get("permissions", ()))


class ApprovalOps(JournalOps):
    """Writing an approval with its wait, reading it, and deciding it, in the sender's transaction."""

    if TYPE_CHECKING:  # from MessageOps, next to this class in the backend
        _deliver: Callable[[StepAttempt, dict[str, Any], Any], bool]

    def _open_approval(self, run_id: Any, attempt_id: int, key: str, approval: NewApproval, now: datetime) -> int:
        """Inside the wait's fenced transaction: the approval row of a new wait."""
        row = Approval.objects.create(
            workflow_run_id=run_id,
            attempt_id=attempt_id,
            step_key=key,
            name=approval.name,
            details=approval.details,
            assignees=approval.assignees,
            created_at=now,
            timeout_at=approval.timeout_at,
            form=approval.form,
            form_fields=approval.form_fields,
            initial=approval.initial,
            due_at=approval.due_at,
            required=approval.required,
            excluded=approval.excluded,
            remind_every=approval.remind_every,
            next_remind_at=None if approval.remind_every is None else now + approval.remind_every,
            escalate_at=approval.escalate_at,
            escalate_to=approval.escalate_to,
        )
        return int(row.id)

    def approval(self, approval_id: int) -> ApprovalRecord | None:
        """The approval or task with this id, or None."""
        row = Approval.objects.filter(id=approval_id).first()
        return None if row is None else _record(row)

    def run_approvals(self, run_id: Any) -> list[ApprovalRecord]:
        """The approvals and tasks a run opened, oldest first."""
        return [_record(row) for row in Approval.objects.filter(workflow_run_id=run_id).order_by("id")]

    def decide_approval(self, approval_id: int, approved: bool, by: str, comment: str) -> dict[str, Any]:
        """Decide an open approval and deliver the decision to its run's wait; returns the decision.

        The decision is ``{"approved", "by", "at" (ISO 8601, the database
        clock), "comment", "approvers", "remaining"}``: who approved, and how
        many approvals are still needed. An approval that needs several
        (``required``) records this one as a sign-off and delivers nothing
        until the last one needed (``remaining`` > 0 until then); a rejection
        rejects at once. Raises :class:`ApprovalNotFound`,
        :class:`ApprovalNotAssigned` for an excluded user or one who approved
        already, or :class:`ApprovalClosed` (decided before, timed out, or
        the run ended), having written nothing. The assignees are the
        caller's to check.
        """
        status = ApprovalStatus.APPROVED if approved else ApprovalStatus.REJECTED
        return self._close(approval_id, status, by, {"approved": bool(approved), "comment": comment})

    def submit_task(self, approval_id: int, by: str, data: dict[str, Any]) -> dict[str, Any]:
        """Close an open task with its form's data (JSON, validated by the caller) and deliver it; returns it.

        The submission is ``{"data", "by", "at"}``; the errors are
        :meth:`decide_approval`'s.
        """
        return self._close(approval_id, ApprovalStatus.SUBMITTED, by, {"data": data})

    def _close(self, approval_id: int, status: str, by: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Move an open approval to ``status`` and deliver ``fields`` with who and when, in one transaction."""
        with self.write_lock(), transaction.atomic(using=self.alias):
            run_id = Approval.objects.filter(id=approval_id).values_list("workflow_run_id", flat=True).first()
            if run_id is None:
                raise ApprovalNotFound(f"no approval with id {approval_id}")
            run_status = (
                WorkflowRun.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            )
            # Locked after the run, as the worker's writes do: sign-offs are read and written one caller at a time.
            row = Approval.objects.select_for_update().get(id=approval_id)
            now = self.now()
            if row.timeout_at <= now:
                # Timed out, though no worker has journaled the timeout yet (workers down or behind).
                raise ApprovalClosed(f"{_noun(row.form, approval_id)} timed out; it can no longer be decided")
            if row.status != ApprovalStatus.OPEN:
                raise closed_error(approval_id, row.status, row.decided_by, row.decided_at, row.form)
            if row.claimed_by and row.claimed_by != by:
                raise claimed_error(approval_id, row.claimed_by, row.form, "decide")
            delivered = {**fields, "by": by, "at": now.isoformat()}
            if not row.form:
                row.signoffs, delivered = sign_off(approval_id, row.excluded, row.signoffs, row.required, delivered)
            if run_status is None or run_status in FINISHED_STATUSES:
                raise ApprovalClosed(
                    f"{_noun(row.form, approval_id)} cannot be decided: its run is {run_status or 'deleted'}"
                )
            activity = [*row.activity, closing_entry(status, by, now, bool(delivered.get("remaining")))]
            if delivered.get("remaining"):
                Approval.objects.filter(id=approval_id).update(signoffs=row.signoffs, activity=activity)
                return delivered
            won = Approval.objects.filter(id=approval_id, status=ApprovalStatus.OPEN).update(
                status=status,
                decided_by=by,
                decided_at=now,
                comment=fields.get("comment", ""),
                signoffs=row.signoffs,
                activity=activity,
            )
            if not won:
                raise _closed(approval_id)
            signal = Signal.objects.create(
                workflow_run_id=run_id,
                name=f"approval:{approval_id}",
                data=delivered,
                idempotency_key=f"approval:{approval_id}",
                consumed_by_id=row.attempt_id,
                consumed_at=now,
            )
            wait = StepAttempt.objects.get(id=row.attempt_id)
            if not self._deliver(wait, {"signal_id": signal.id, "data": delivered}, now):
                raise ApprovalClosed(f"{_noun(row.form, approval_id)} cannot be decided: its wait has ended")
            return delivered

    def change_claim(self, approval_id: int, action: str, by: str, to: str = "", force: bool = False) -> ApprovalRecord:
        """Claim, release or reassign an open approval (:func:`apply_claim`, under its row lock); the record after.

        Raises :class:`ApprovalNotFound`, :class:`ApprovalClosed` (decided,
        timed out) and :class:`~django_openworkflow.errors.TaskClaimed`
        (someone else holds it), having written nothing. Who may is the
        caller's to check.
        """
        with self.write_lock(), transaction.atomic(using=self.alias):
            row = Approval.objects.select_for_update().filter(id=approval_id).first()
            if row is None:
                raise ApprovalNotFound(f"no approval with id {approval_id}")
            run_status = WorkflowRun.objects.filter(id=row.workflow_run_id).values_list("status", flat=True).first()
            if run_status is None or run_status in FINISHED_STATUSES:
                raise ApprovalClosed(f"{_noun(row.form, approval_id)} cannot be claimed: its run is {run_status}")
            if apply_claim(row, action, by, self.now(), to, force):
                row.save(update_fields=["claimed_by", "claimed_at", "assignees", "activity"])
            return _record(row)

    def fire_task_timers(self, limit: int = 100) -> list[FiredTimer]:
        """Fire the reminders and escalations due now, at most ``limit`` approvals; what to notify, for the caller.

        Each approval is read, changed (:func:`due_timers`) and written under
        its row lock, in its own transaction: a timer fires once, whichever
        worker sweeps, and one that was due while every worker was down fires
        at the next sweep.
        """
        from django.db.models import Q

        now = self.now()
        due = Q(next_remind_at__lte=now) | Q(escalate_at__lte=now, escalated_at__isnull=True)
        candidates = list(
            Approval.objects.filter(due, status=ApprovalStatus.OPEN, timeout_at__gt=now)
            .exclude(workflow_run__status__in=FINISHED_STATUSES)  # a canceled run's task is nobody's work
            .order_by("id")
            .values_list("id", flat=True)[:limit]
        )
        fired: list[FiredTimer] = []
        for approval_id in candidates:
            with self.write_lock(), transaction.atomic(using=self.alias):
                row = Approval.objects.select_for_update().filter(id=approval_id, status=ApprovalStatus.OPEN).first()
                if row is None:
                    continue
                found = due_timers(row, now)
                if found:
                    row.save(update_fields=["assignees", "activity", "next_remind_at", "escalated_at"])
                    record = _record(row)
                    runs = WorkflowRun.objects.filter(id=row.workflow_run_id)
                    workflow = runs.values_list("workflow_name", flat=True).first() or ""
                    fired.extend(FiredTimer(record, workflow, reason, notify) for reason, notify in found)
        return fired


CLAIM_ACTIONS = ("claim", "release", "reassign")
PAST = {"claim": "claimed", "release": "released", "reassign": "reassigned"}


def claimed_error(approval_id: int, holder: str, form: str, doing: str) -> TaskClaimed:
    """The refusal of someone who is not the holder of a claimed task (every backend's words)."""
    what = _noun(form, approval_id)
    return TaskClaimed(
        f"{what} is claimed by {holder}: only they may {doing} it (they may release it, or a user allowed to "
        "reassign tasks may release or reassign it)",
        claimed_by=holder,
    )


def apply_claim(row: Any, action: str, by: str, now: datetime, to: str = "", force: bool = False) -> bool:
    """Claim (``by`` takes it), release or reassign (to the username ``to``) ``row``, in place; whether it changed.

    ``row`` is an approval (a model instance or the in-memory row): open,
    not timed out. A claim of a task ``by`` holds already changes nothing;
    a claim or a release of a task someone else holds raises
    :class:`~django_openworkflow.errors.TaskClaimed`, unless ``force`` (a
    release by a user who may reassign). A reassignment makes ``to`` its
    holder and, when they are not named among the assignees, adds them.
    Every change is appended to ``activity``.
    """
    if action not in CLAIM_ACTIONS:
        raise ValueError(f"unknown claim action {action!r}")
    if row.status != ApprovalStatus.OPEN:
        raise closed_error(row.id, row.status, row.decided_by, row.decided_at, row.form)
    if row.timeout_at <= now:
        raise ApprovalClosed(f"{_noun(row.form, row.id)} timed out; it can no longer be {PAST[action]}")
    holder = row.claimed_by
    entry: dict[str, Any] = {"action": action, "by": by, "at": now.isoformat()}
    if action == "claim":
        if holder == by:
            return False
        if holder:
            raise claimed_error(row.id, holder, row.form, "work on")
        row.claimed_by, row.claimed_at = by, now
    elif action == "release":
        if not holder:
            return False
        if holder != by and not force:
            raise claimed_error(row.id, holder, row.form, "release")
        row.claimed_by, row.claimed_at = "", None
        entry["from"] = holder
    else:
        row.claimed_by, row.claimed_at = to, now
        entry.update({"from": holder, "to": to})
        users = list(row.assignees.get("users", []))
        if to not in users:
            row.assignees = {**row.assignees, "users": [*users, to]}
    row.activity = [*row.activity, entry]
    return True


def due_timers(row: Any, now: datetime) -> list[tuple[str, dict[str, list[str]]]]:
    """Fire ``row``'s timers due at ``now``, in place; each one's reason and whom it notifies.

    An escalation adds ``escalate_to`` to the assignees, once, and notifies
    those it added. A reminder notifies the holder of a claimed task, or
    else every assignee, and is due again ``remind_every`` after now (the
    reminders missed while no worker ran are not sent one by one). Both are
    recorded in ``activity``: reminders in a row as one entry (:func:`reminded`).
    """
    fired: list[tuple[str, dict[str, list[str]]]] = []
    at = now.isoformat()
    if row.escalate_at is not None and row.escalated_at is None and row.escalate_at <= now:
        merged = {kind: list(row.assignees.get(kind, [])) for kind in ("users", "groups", "permissions")}
        for kind, names in row.escalate_to.items():
            merged[kind] = [*merged.get(kind, []), *(name for name in names if name not in merged.get(kind, []))]
        row.assignees, row.escalated_at = merged, now
        row.activity = [*row.activity, {"action": "escalate", "by": "", "at": at, "to": row.escalate_to}]
        fired.append(("escalation", dict(row.escalate_to)))
    if row.next_remind_at is not None and row.next_remind_at <= now and row.remind_every:
        row.next_remind_at = now + row.remind_every
        notify = {"users": [row.claimed_by]} if row.claimed_by else dict(row.assignees)
        row.activity = reminded(row.activity, at)
        fired.append(("reminder", notify))
    return fired


def reminded(activity: list[dict[str, Any]], at: str) -> list[dict[str, Any]]:
    """``activity`` with a reminder sent at ``at``: reminders in a row are one entry, counted.

    A task open for a month with a reminder every hour would otherwise carry
    720 entries in its row; between two actions of a person, the entry says
    how many reminders went out, the first's time (``at``) and the last's.
    """
    last = activity[-1] if activity else None
    if last is not None and last.get("action") == "remind":
        return [*activity[:-1], {**last, "count": int(last.get("count", 1)) + 1, "last_at": at}]
    return [*activity, {"action": "remind", "by": "", "at": at}]


def closing_entry(status: str, by: str, now: datetime, partial: bool) -> dict[str, Any]:
    """The activity entry of a decision or a submission (a sign-off when more approvals are needed)."""
    action = {"approved": "approve", "rejected": "reject", "submitted": "submit"}.get(status, status)
    return {"action": "sign-off" if partial else action, "by": by, "at": now.isoformat()}


def sign_off(
    approval_id: int, excluded: list[str], signoffs: list[dict[str, Any]], required: int, decision: dict[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A yes/no decision on an approval that may need several: the sign-offs, and the decision.

    An approval adds a sign-off; a rejection adds none and needs no more.
    The decision gains ``approvers`` and ``remaining``. Raises
    :class:`ApprovalNotAssigned` for an excluded user, or one who approved
    already (every backend's rule).
    """
    by = decision["by"]
    if by in excluded:
        raise ApprovalNotAssigned(
            f"{by} may not decide approval {approval_id}: the workflow excludes them from it (segregation of duties)"
        )
    if any(signoff["by"] == by for signoff in signoffs):
        raise ApprovalNotAssigned(
            f"{by} approved approval {approval_id} already: it needs {required - len(signoffs)} more approval(s), "
            "from other people"
        )
    if decision["approved"]:
        signoffs = [*signoffs, {"by": by, "at": decision["at"], "comment": decision["comment"]}]
    remaining = max(required - len(signoffs), 0) if decision["approved"] else 0
    approvers = [signoff["by"] for signoff in signoffs]
    return signoffs, {**decision, "approvers": approvers, "remaining": remaining}


def _record(row: Approval) -> ApprovalRecord:
    return ApprovalRecord(
        id=row.id,
        run_id=row.workflow_run_id,
        step_key=row.step_key,
        name=row.name,
        details=row.details,
        assignees=row.assignees,
        status=row.status,
        created_at=row.created_at,
        timeout_at=row.timeout_at,
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        form=row.form,
        form_fields=row.form_fields,
        initial=row.initial,
        due_at=row.due_at,
        required=row.required,
        excluded=list(row.excluded or []),
        signoffs=list(row.signoffs or []),
        claimed_by=row.claimed_by,
        claimed_at=row.claimed_at,
        activity=list(row.activity or []),
        escalate_at=row.escalate_at,
        escalate_to=dict(row.escalate_to or {}),
        escalated_at=row.escalated_at,
    )


def _noun(form: str, approval_id: int) -> str:
    return f"task {approval_id}" if form else f"approval {approval_id}"


def _closed(approval_id: int) -> ApprovalClosed:
    """Why an approval is no longer open, naming who decided it first."""
    row = Approval.objects.filter(id=approval_id).values_list("status", "decided_by", "decided_at", "form").first()
    assert row is not None
    return closed_error(approval_id, *row)


def closed_error(approval_id: int, status: str, by: str, at: datetime | None, form: str) -> ApprovalClosed:
    """The error for a decision on an approval or task that is ``status`` already (every backend's words)."""
    what = _noun(form, approval_id)
    if status == ApprovalStatus.TIMED_OUT:
        return ApprovalClosed(f"{what} timed out; it can no longer be decided")
    when = f" at {at.isoformat()}" if at is not None else ""
    return ApprovalClosed(f"{what} was already {status} by {by or 'someone'}{when}", decided_by=by)
