"""The API's approvals: the open ones the caller may decide, and deciding one.

Any authenticated user (session or token) may call them: the list holds
only the approvals the user may decide, and a decision on another one is
refused (403, ``not_assigned``), as in the admin's Inbox — the same check
(:func:`django_openworkflow.client.approvals.decide_approval`). A second
decision is told who decided first, in the message (409, ``already_decided``).
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from ..client.approvals import approvals_for, decide_approval
from ..errors import ApprovalClosed, ApprovalNotAssigned, ApprovalNotFound
from ..models import Approval
from .fields import ApiError, _kind, json_response
from .views import _body, endpoint


def approval_json(approval: Approval) -> dict[str, Any]:
    run = approval.workflow_run
    return {
        "id": approval.id,
        "name": approval.name,
        "details": approval.details,
        "run_id": str(approval.workflow_run_id),
        "workflow": run.workflow_name,
        "subject": {"type": run.subject_type, "id": run.subject_id} if run.subject_type else None,
        "input": run.input,
        "step": approval.step_key,
        "assignees": approval.assignees,
        "created_at": approval.created_at,
        "timeout_at": approval.timeout_at,
    }


@endpoint(GET="user")
def approval_list(request: HttpRequest) -> HttpResponse:
    """The open approvals the caller may decide, oldest first."""
    if request.GET:
        name = next(iter(request.GET))
        raise ApiError(400, "unknown_parameter", f"unknown parameter {name!r:.80}; this takes none", name)
    return json_response({"approvals": [approval_json(found) for found in approvals_for(request.user)]})


@endpoint(POST="user")
def approval_decide(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Approve (``"approved": true``) or reject, with an optional comment; the decision is delivered to the run."""
    if not (approval_id.isascii() and approval_id.isdigit() and len(approval_id) < 19):
        raise ApiError(404, "not_found", f"{approval_id!r:.40} is not an approval id")
    number = int(approval_id)
    data = _body(request, {"approved": True, "comment": False})
    approved = data["approved"]
    if not isinstance(approved, bool):
        raise ApiError(400, "invalid", "approved must be true or false", "approved")
    comment = data.get("comment")
    if comment is None:  # null is the same as no comment; false, 0, [] or {} are mistakes, not empty comments
        comment = ""
    if not isinstance(comment, str):
        raise ApiError(400, "invalid", f"comment must be a string, not {_kind(comment)}", "comment")
    try:
        decision = decide_approval(number, request.user, approved=approved, comment=comment)
    except ApprovalNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except ApprovalNotAssigned as exc:
        raise ApiError(403, "not_assigned", str(exc)) from None
    except ApprovalClosed as exc:  # the message names who decided first, and when
        raise ApiError(409, "already_decided", str(exc)) from None
    return json_response({"approval_id": number, "decision": decision})
