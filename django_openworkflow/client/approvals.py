"""Deciding approvals (``ctx.wait_for_approval``) and listing the approvals and tasks a user may decide.

The one front door that the admin's inbox, the API and the test helpers
call: the same assignee check, the same "first decision wins", the same
audit trail (an entry in Django's admin log on the run, besides the
decision in the run's journal). Tasks that ask for a form
(``ctx.wait_for_input``) are submitted through ``human_tasks.py``, on the same
checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Q, QuerySet

from ..definitions.payload import check_text
from ..encryption import is_on
from ..errors import ApprovalNotAssigned, ApprovalNotFound, InvalidArgument, WrongTaskKind
from ..models import FINISHED_STATUSES, Approval, ApprovalStatus, WorkflowRun
from ..store import get_backend
from ..store.approvals import Decider, claimed_error, closed_error, may_decide
from ..store.backends.base import Backend
from ..store.interface import ApprovalStore
from ..store.records import ApprovalRecord

INBOX_LIMIT = 200
"""The most approvals the inbox and the API list at once (the oldest first)."""
COMMENT_LIMIT = 2000


def open_approvals() -> QuerySet[Approval]:
    """Every approval still open, of an unfinished run, whose timeout has not passed; oldest first."""
    from django.db.models.functions import Now

    return (
        Approval.objects.filter(status=ApprovalStatus.OPEN, timeout_at__gt=Now())
        .exclude(Q(workflow_run__status__in=FINISHED_STATUSES))
        .select_related("workflow_run")
        .order_by("id")
    )


SCOPES = ("all", "mine", "groups")
"""The Inbox's views: every task the user may decide; those they hold or that name them; their groups' unclaimed."""


def approvals_for(user: Any, limit: int = INBOX_LIMIT, scope: str = "all") -> list[Approval]:
    """The open approvals ``user`` may decide (:func:`~django_openworkflow.store.approvals.may_decide`), overdue first.

    Not those that exclude the user, nor those the user approved already and that wait for others' approvals.
    ``scope``: ``"all"`` (every one the user may decide, claimed by others included, shown as taken),
    ``"mine"`` (claimed by the user, or naming them among the assignees and claimed by nobody else), or
    ``"groups"`` (claimed by nobody, and assigned to one of the user's groups). Within the limit (the
    oldest first), the overdue come first, then the rest by due time, then the oldest.
    """
    if scope not in SCOPES:
        raise InvalidArgument(f"unknown scope {scope!r:.40}; the scopes are {', '.join(SCOPES)}", "scope")
    found: list[Approval] = []
    in_scope, decidable = _decidable(user, groups=scope == "groups")
    for approval in decidable:
        if in_scope(approval, scope):
            found.append(approval)
            if len(found) >= limit:
                break
    if found:
        runs = WorkflowRun.objects.filter(id__in={approval.workflow_run_id for approval in found})
        inputs = dict(runs.values_list("id", "input"))
        for approval in found:
            approval.workflow_run.input = inputs.get(approval.workflow_run_id)
    now = get_backend().now() if found else None
    return sorted(found, key=lambda approval: _urgency(approval, now))


def inbox_counts(user: Any) -> dict[str, int]:
    """How many tasks each of the Inbox's views holds for ``user`` (up to the Inbox's limit each), and how many of
    all are ``"overdue"``: one scan of the open approvals, the same rules as :func:`approvals_for`."""
    counts = dict.fromkeys((*SCOPES, "overdue"), 0)
    now = get_backend().now()
    in_scope, decidable = _decidable(user, groups=True)
    for approval in decidable:
        for view in counts:
            if counts[view] < INBOX_LIMIT and (
                is_overdue(approval.due_at, now) if view == "overdue" else in_scope(approval, view)
            ):
                counts[view] += 1
        if min(counts.values()) >= INBOX_LIMIT:
            break
    return counts


def _decidable(user: Any, *, groups: bool) -> tuple[Callable[[Approval, str], bool], Iterator[Approval]]:
    """Whether an approval is in one of the Inbox's views for ``user``, and the open approvals ``user`` may decide
    and has not, oldest first.

    ``groups``: read the user's groups (for the ``"groups"`` view). The scan reads no run payload.
    """
    decider = Decider(user)
    username = user.get_username() if decider.active else ""
    names = _group_names(user) if decider.active and groups else set()

    def in_scope(approval: Approval, scope: str) -> bool:
        return _in_scope(approval, scope, username, names)

    def scan() -> Iterator[Approval]:
        found = open_approvals().defer("workflow_run__input", "workflow_run__output", "workflow_run__error")
        for approval in found.iterator(chunk_size=500):
            decided = username in approval.excluded or any(s["by"] == username for s in approval.signoffs)
            if not decided and decider.may(approval.assignees):
                yield approval

    return in_scope, scan()


def _in_scope(approval: Approval, scope: str, username: str, groups: set[str]) -> bool:
    holder = approval.claimed_by
    if scope == "mine":
        return holder == username or (not holder and username in approval.assignees.get("users", ()))
    if scope == "groups":
        return not holder and bool(groups & set(approval.assignees.get("groups", ())))
    return True


def _group_names(user: Any) -> set[str]:
    if not hasattr(user, "groups"):  # a custom user model may have no groups
        return set()
    return set(user.groups.values_list("name", flat=True))


def _urgency(approval: Approval, now: Any) -> tuple[int, Any, int]:
    """Overdue first (the longest overdue first), then by due time, then the tasks with no due time, oldest first."""
    due = approval.due_at
    if due is None:
        return (2, approval.created_at, approval.id)
    return (0 if due <= now else 1, due, approval.id)


def is_overdue(due_at: Any, now: Any) -> bool:
    """Whether a task due at ``due_at`` (or None) is overdue at ``now``."""
    return due_at is not None and due_at <= now


def decide_approval(
    approval_id: int, user: Any, *, approved: bool, comment: str = "", store: ApprovalStore | None = None
) -> dict[str, Any]:
    """Approve or reject approval ``approval_id`` as ``user``; returns the decision delivered to the run.

    The decision, ``{"approved", "by", "at", "comment", "approvers",
    "remaining"}``, is what the run's ``ctx.wait_for_approval`` returns (as
    an ``ApprovalDecision``), and is recorded in the run's journal and in
    Django's admin log. An approval that needs several people's approvals
    (``approvals_required``) records this one and delivers nothing until the
    last one needed: ``remaining`` says how many more are needed (0 once
    delivered); one rejection is delivered at once. Raises
    :class:`~django_openworkflow.errors.ApprovalNotAssigned` when ``user`` is
    not an assignee (nor a superuser), is excluded from the approval, or
    approved it already,
    :class:`~django_openworkflow.errors.ApprovalClosed` when it was decided
    first by someone else (``decided_by`` names them), timed out or its run
    ended, :class:`~django_openworkflow.errors.WrongTaskKind` for a task
    that asks for a form (:func:`~django_openworkflow.submit_task` it), and
    :class:`~django_openworkflow.errors.ApprovalNotFound`; none of them
    delivered anything. ``store``: an in-memory backend of
    ``django_openworkflow.testing.memory`` (no admin log then), else the
    workflow database.
    """
    if not isinstance(comment, str):
        raise InvalidArgument(f"comment must be a string, got {type(comment).__name__}", "comment")
    if len(comment) > COMMENT_LIMIT:
        raise InvalidArgument(f"comment is {len(comment)} characters long; the limit is {COMMENT_LIMIT}", "comment")
    check_text(comment, "comment")
    backend: ApprovalStore = store or get_backend()
    record = assigned(backend, approval_id, user, "decision")
    decision = backend.decide_approval(approval_id, approved, user.get_username(), comment)
    said = f"{'Approved' if approved else 'Rejected'} {record.name!r}"
    if record.required > 1 and approved:
        said += f" ({record.required - decision['remaining']} of {record.required})"
    # The admin's log is not a payload column: with encryption on, the comment stays in the approval alone.
    log_decision(backend, user, record, said + (f": {comment}" if comment and not is_on() else ""))
    return decision


def assigned(store: ApprovalStore, approval_id: int, user: Any, kind: str) -> ApprovalRecord:
    """The approval or task ``user`` means to close, of ``kind``; the errors of :func:`decide_approval` else."""
    record = store.approval(approval_id)
    if record is None:
        raise ApprovalNotFound(f"no approval with id {approval_id}")
    if record.kind != kind:
        if record.kind == "input":
            raise WrongTaskKind(f"task {approval_id} ({record.name!r}) asks for a form: submit it, it takes no yes/no")
        raise WrongTaskKind(f"approval {approval_id} ({record.name!r}) takes a yes/no decision, not a form")
    if not may_decide(user, record.assignees):
        noun = "task" if record.form else "approval"
        raise ApprovalNotAssigned(
            f"{user.get_username() or 'this user'} may not decide {noun} {approval_id} ({record.name!r}): "
            "it is assigned to other users, groups or permissions"
        )
    return record


def still_open(store: ApprovalStore, record: ApprovalRecord, by: str = "") -> None:
    """Raise the :class:`~django_openworkflow.errors.ApprovalClosed` of a task that is decided or timed out already.

    And the :class:`~django_openworkflow.errors.TaskClaimed` of one that
    someone other than ``by`` holds. A hint before the work of validating a
    form: the close itself checks again, atomically.
    """
    if record.status != ApprovalStatus.OPEN:
        raise closed_error(record.id, record.status, record.decided_by, record.decided_at, record.form)
    if record.timeout_at <= store.now():
        raise closed_error(record.id, ApprovalStatus.TIMED_OUT, "", None, record.form)
    if by and record.claimed_by and record.claimed_by != by:
        raise claimed_error(record.id, record.claimed_by, record.form, "submit")


def log_decision(store: ApprovalStore, user: Any, record: ApprovalRecord, message: str) -> None:
    """The entry in Django's admin log on the run (the run's *History*); none for an in-memory store."""
    if not isinstance(store, Backend):
        return
    LogEntry.objects.log_actions(
        user_id=user.pk,
        queryset=list(WorkflowRun.objects.filter(id=record.run_id)),
        action_flag=CHANGE,
        change_message=f"{message} (django-openworkflow)",
    )
