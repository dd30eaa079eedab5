"""The API's approvals and tasks: the open ones the caller may decide, deciding one, submitting a task's form.

Any authenticated user (session or token) may call them: the list holds
only the approvals the user may decide, and a decision on another one is
refused (403, ``not_assigned``), as in the admin's Inbox — the same check
(:func:`django_openworkflow.client.approvals.decide_approval`). A second
decision is told who decided first, in the message (409, ``already_decided``).
A task that asks for a form is listed with its fields as JSON Schema
(``form_schema.py``) and submitted with ``POST approvals/{id}/submit``; the
form's own validation refuses with 400 ``invalid_form`` and its errors by
field (:func:`django_openworkflow.client.human_tasks.submit_task`). A file
field takes its file as JSON, ``{"name", "content_base64", "content_type"?}``:
the API reads JSON only, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse

from ..client.approvals import SCOPES, approvals_for, decide_approval, is_overdue
from ..client.human_tasks import build_form, claim_task, reassign_task, release_task, submit_task
from ..conf import owf_settings
from ..definitions.payload import check_text
from ..errors import (
    ApprovalClosed,
    ApprovalError,
    ApprovalNotAssigned,
    ApprovalNotFound,
    InvalidArgument,
    TaskClaimed,
    TaskFormInvalid,
    TaskFormUnavailable,
    WrongTaskKind,
)
from ..models import Approval
from ..store import get_backend
from ..store.records import ApprovalRecord
from .fields import ApiError, _kind, json_response
from .form_schema import form_schema
from .views import _body, _no_body, endpoint

USERNAME_LENGTH = 150
"""The longest username a task is reassigned to: Django's ``User.username``, and the column that holds the holder."""


def approval_json(approval: Approval, now: Any = None) -> dict[str, Any]:
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
        "due_at": approval.due_at,
        "approvals_required": approval.required,
        "approved_by": [signoff["by"] for signoff in approval.signoffs],
        "overdue": is_overdue(approval.due_at, now or get_backend().now()),
        **claim_json(approval),
        **_task_form(approval),
    }


def claim_json(approval: Approval | ApprovalRecord) -> dict[str, Any]:
    """Who holds the task, its escalation, and its activity (claims, releases, reminders, decisions)."""
    return {
        "claimed_by": approval.claimed_by or None,
        "claimed_at": approval.claimed_at,
        "escalate_at": approval.escalate_at,
        "escalated_at": approval.escalated_at,
        "activity": approval.activity,
    }


def _task_form(approval: Approval) -> dict[str, Any]:
    """``kind``, and a task's ``form`` (its fields as JSON Schema) or the ``form_error`` saying why there is none."""
    if not approval.form:
        return {"kind": "decision", "form": None, "form_error": None}
    try:
        return {"kind": "input", "form": form_schema(build_form(approval)), "form_error": None}
    except TaskFormUnavailable as exc:
        return {"kind": "input", "form": None, "form_error": str(exc)}


@endpoint(GET="user")
def approval_list(request: HttpRequest) -> HttpResponse:
    """The open approvals the caller may decide, overdue first; ``?scope=mine|groups|all`` as the Inbox's views."""
    unknown = next((name for name in request.GET if name != "scope"), None)
    if unknown is not None:
        raise ApiError(400, "unknown_parameter", f"unknown parameter {unknown!r:.80}; this takes scope", unknown)
    scope = request.GET.get("scope", "all")
    if scope not in SCOPES:
        raise ApiError(400, "invalid", f"unknown scope {scope!r:.40}; the scopes are {', '.join(SCOPES)}", "scope")
    now = get_backend().now()
    found = approvals_for(request.user, scope=scope)
    return json_response({"approvals": [approval_json(approval, now) for approval in found]})


def _approval_number(approval_id: str) -> int:
    if not (approval_id.isascii() and approval_id.isdigit() and len(approval_id) < 19):
        raise ApiError(404, "not_found", f"{approval_id!r:.40} is not an approval id")
    return int(approval_id)


REFUSALS: dict[type[ApprovalError], tuple[int, str]] = {
    ApprovalNotFound: (404, "not_found"),
    ApprovalNotAssigned: (403, "not_assigned"),
    ApprovalClosed: (409, "already_decided"),  # the message names who decided first, and when
    TaskClaimed: (409, "claimed"),  # the message names who holds it
    TaskFormUnavailable: (409, "form_unavailable"),
    WrongTaskKind: (400, "wrong_kind"),
}


def _refused(exc: ApprovalError) -> ApiError:
    """What deciding or submitting answers when it delivered nothing."""
    status, code = next((answer for kind, answer in REFUSALS.items() if isinstance(exc, kind)), (400, "invalid"))
    return ApiError(status, code, str(exc))


@endpoint(POST="user")
def approval_decide(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Approve (``"approved": true``) or reject, with an optional comment; the decision is delivered to the run."""
    number = _approval_number(approval_id)
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
    except ApprovalError as exc:
        raise _refused(exc) from None
    return json_response({"approval_id": number, "decision": decision})


@endpoint(POST="user")
def approval_submit(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Submit a task's form: ``{"data": {field: value}}``, validated by the form; its data is delivered to the run.

    A file field takes ``{"name", "content_base64", "content_type"?}``; its file is saved once the form is
    valid and the run receives a reference to it (``task_files.py``). A file that is not base64, too large or
    sent to another field is the form's error, by field (400 ``invalid_form``), and nothing is saved.
    """
    number = _approval_number(approval_id)
    data = _body(request, {"data": True}, extra=_files_allowance(number))["data"]
    if not isinstance(data, dict):
        raise ApiError(400, "invalid", f"data must be an object of the form's fields, not {_kind(data)}", "data")
    try:
        submission = submit_task(number, request.user, data)
    except TaskFormInvalid as exc:
        first = next(iter(exc.errors), None)
        field = None if first in (None, "__all__") else f"data.{first}"
        raise ApiError(400, "invalid_form", str(exc), field, errors=exc.errors) from None
    except ApprovalError as exc:
        raise _refused(exc) from None
    return json_response({"approval_id": number, "submission": submission})


def _files_allowance(number: int) -> int | None:
    """The bytes a task's files may add to a submission's body: each file field's largest file, in base64.

    None when files have no limit (``TASK_FILE_MAX_BYTES`` None); 0 for an unknown task or a form without files
    (the submission is refused anyway, or takes none).
    """
    approval = Approval.objects.filter(id=number).exclude(form="").first()
    if approval is None:
        return 0
    try:
        fields = build_form(approval).fields.values()
    except TaskFormUnavailable:
        return 0
    count = sum(isinstance(field, forms.FileField) for field in fields)
    largest = owf_settings.task_file_max_bytes
    if count and largest is None:
        return None
    return count * 4 * -(-(largest or 0) // 3)  # base64: 4 characters per 3 bytes, rounded up


def _claim_changed(number: int, change: Callable[[], ApprovalRecord]) -> HttpResponse:
    """Claim, release or reassign (``change``), answered with who holds the task now, or refused."""
    try:
        record = change()
    except ApprovalError as exc:
        raise _refused(exc) from None
    return json_response({"approval_id": number, **claim_json(record)})


@endpoint(POST="user")
def approval_claim(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Claim an approval or task for the caller: only they may then decide or submit it."""
    number = _approval_number(approval_id)
    _no_body(request)
    return _claim_changed(number, lambda: claim_task(number, request.user))


@endpoint(POST="user")
def approval_release(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Release the claim on an approval or task (its holder, or a user who may reassign)."""
    number = _approval_number(approval_id)
    _no_body(request)
    return _claim_changed(number, lambda: release_task(number, request.user))


@endpoint(POST="user")
def approval_reassign(request: HttpRequest, approval_id: str) -> HttpResponse:
    """Give an approval or task to another user: ``{"to": "username"}`` (the reassign_approval permission)."""
    number = _approval_number(approval_id)
    to = _body(request, {"to": True})["to"]
    if not isinstance(to, str):
        raise ApiError(400, "invalid", f"to must be a username, not {_kind(to)}", "to")
    if not 1 <= len(to) <= USERNAME_LENGTH:
        raise ApiError(400, "invalid", f"to must be a username of 1 to {USERNAME_LENGTH} characters", "to")
    check_text(to, "to")  # PayloadError (400 bad_payload): a NUL or a lone surrogate
    try:
        return _claim_changed(number, lambda: reassign_task(number, request.user, to))
    except InvalidArgument as exc:
        raise ApiError(400, "invalid", str(exc), "to") from None
