"""The OpenAPI description of who works on a human task (``approvals.py``): claim, release, reassign."""

from __future__ import annotations

from typing import Any

from .fields import NO_NUL
from .schema_blocks import TEXT, TIME, _answer, _body, _errors, _object

ACTIVITY = {
    "type": "array",
    "description": "what happened to the task, oldest first: claim, release, reassign, remind, escalate, "
    "sign-off, approve, reject, submit",
    "items": _object(
        {
            "action": TEXT,
            "by": {**TEXT, "description": "the username; empty for a timer (remind, escalate)"},
            "at": {"type": "string", "format": "date-time"},
            "from": {**TEXT, "description": "release, reassign: who held it"},
            "to": {"description": "reassign: the new holder; escalate: the assignees added"},
        }
    ),
}
CLAIM_FIELDS: dict[str, Any] = {
    "claimed_by": {"type": ["string", "null"], "description": "who holds the task; null when nobody does"},
    "claimed_at": TIME,
    "escalate_at": {**TIME, "description": "when the escalation fires (escalate_after); null when none"},
    "escalated_at": {**TIME, "description": "when it fired; null until then"},
    "activity": ACTIVITY,
}
CLAIM_ANSWER = _object({"approval_id": {"type": "integer"}, **CLAIM_FIELDS})


def task_paths() -> dict[str, Any]:
    """``/approvals/{id}/claim``, ``release`` and ``reassign``."""
    approval_id = {"name": "approval_id", "in": "path", "required": True, "schema": {"type": "integer"}}
    refused = _errors(400, 404, 409, 415)
    return {
        "/approvals/{approval_id}/claim": {
            "post": {
                "summary": "Claim an approval or task: only the caller may then decide or submit it",
                "description": "Any authenticated user among the assignees (403 not_assigned otherwise). Others "
                "still list it, with claimed_by. A task someone else holds is 409 claimed, naming them; one the "
                "caller holds already is answered as it is. An approval that needs several approvals cannot be "
                "claimed (400 wrong_kind). No body, or {}.",
                "parameters": [approval_id],
                "responses": {"200": _answer("the task's holder now", CLAIM_ANSWER), **refused},
            }
        },
        "/approvals/{approval_id}/release": {
            "post": {
                "summary": "Release the claim on an approval or task",
                "description": "Its holder, or a user with the permission "
                "OPENWORKFLOW['TASK_REASSIGN_PERMISSION'] names (409 claimed for another assignee; 403 "
                "not_assigned for someone else). A task nobody holds is answered as it is. No body, or {}.",
                "parameters": [approval_id],
                "responses": {"200": _answer("the task's holder now", CLAIM_ANSWER), **refused},
            }
        },
        "/approvals/{approval_id}/reassign": {
            "post": {
                "summary": "Give an approval or task to another user",
                "description": "Needs the permission OPENWORKFLOW['TASK_REASSIGN_PERMISSION'] names (403 not_assigned "
                "otherwise). The task is claimed for the user to; when its assignees do not name them, they are "
                "added. An unknown, inactive or excluded user is 400 invalid.",
                "parameters": [approval_id],
                "requestBody": _body(
                    ["to"],
                    {
                        "to": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 150,
                            "pattern": NO_NUL,
                            "description": "the username of the new holder",
                        }
                    },
                ),
                "responses": {"200": _answer("the task's holder now", CLAIM_ANSWER), **refused},
            }
        },
    }
