"""Deciding approvals (``ctx.wait_for_approval``) and listing those a user may decide.

The one front door that the admin's inbox and the API call: the same
assignee check, the same "first decision wins", the same audit trail (an
entry in Django's admin log on the run, besides the decision in the run's
journal).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import Q, QuerySet

from ..definitions.payload import check_text
from ..encryption import is_on
from ..errors import ApprovalNotAssigned, ApprovalNotFound, InvalidArgument
from ..models import FINISHED_STATUSES, Approval, ApprovalStatus, WorkflowRun
from ..store import get_backend
from ..store.approvals import Decider, may_decide

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


def approvals_for(user: Any, limit: int = INBOX_LIMIT) -> list[Approval]:
    """The open approvals ``user`` may decide (see :func:`~django_openworkflow.store.approvals.may_decide`)."""
    found: list[Approval] = []
    decider = Decider(user)
    # The scan reads no run payload: the inputs of the approvals found are read after, in one query.
    scan = open_approvals().defer("workflow_run__input", "workflow_run__output", "workflow_run__error")
    for approval in scan.iterator(chunk_size=500):
        if decider.may(approval.assignees):
            found.append(approval)
            if len(found) >= limit:
                break
    if found:
        runs = WorkflowRun.objects.filter(id__in={approval.workflow_run_id for approval in found})
        inputs = dict(runs.values_list("id", "input"))
        for approval in found:
            approval.workflow_run.input = inputs.get(approval.workflow_run_id)
    return found


def decide_approval(approval_id: int, user: Any, *, approved: bool, comment: str = "") -> dict[str, Any]:
    """Approve or reject approval ``approval_id`` as ``user``; returns the decision delivered to the run.

    The decision, ``{"approved", "by", "at", "comment"}``, is what the run's
    ``ctx.wait_for_approval`` returns (as an ``ApprovalDecision``), and is
    recorded in the run's journal and in Django's admin log. Raises
    :class:`~django_openworkflow.errors.ApprovalNotAssigned` when ``user`` is
    not an assignee (nor a superuser),
    :class:`~django_openworkflow.errors.ApprovalClosed` when it was decided
    first by someone else (``decided_by`` names them), timed out or its run
    ended, and :class:`~django_openworkflow.errors.ApprovalNotFound`; none
    of them delivered anything.
    """
    if not isinstance(comment, str):
        raise InvalidArgument(f"comment must be a string, got {type(comment).__name__}", "comment")
    if len(comment) > COMMENT_LIMIT:
        raise InvalidArgument(f"comment is {len(comment)} characters long; the limit is {COMMENT_LIMIT}", "comment")
    check_text(comment, "comment")
    approval = Approval.objects.filter(id=approval_id).only("id", "assignees", "name").first()
    if approval is None:
        raise ApprovalNotFound(f"no approval with id {approval_id}")
    if not may_decide(user, approval.assignees):
        raise ApprovalNotAssigned(
            f"{user.get_username() or 'this user'} may not decide approval {approval_id} ({approval.name!r}): "
            "it is assigned to other users, groups or permissions"
        )
    decision = get_backend().decide_approval(approval_id, approved, user.get_username(), comment)
    run_id = Approval.objects.filter(id=approval_id).values_list("workflow_run_id", flat=True).get()
    verb = "Approved" if approved else "Rejected"
    LogEntry.objects.log_actions(
        user_id=user.pk,
        queryset=list(WorkflowRun.objects.filter(id=run_id)),
        action_flag=CHANGE,
        # The admin's log is not a payload column: with encryption on, the comment stays in the approval alone.
        change_message=f"{verb} {approval.name!r}"
        + (f": {comment}" if comment and not is_on() else "")
        + " (django-openworkflow)",
    )
    return decision
