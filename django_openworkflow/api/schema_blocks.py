"""The building blocks of the OpenAPI document (``schema.py``): the run, step and error schemas, and helpers."""

from __future__ import annotations

from typing import Any

from ..client.approvals import COMMENT_LIMIT
from ..definitions.children import ParentClosePolicy
from ..store.queries import DISPLAY_STATUSES, STATUS_FIELD_VALUES
from .fields import NO_NUL

TIME = {"type": ["string", "null"], "format": "date-time"}
TEXT = {"type": "string"}
OPTIONAL_TEXT = {"type": ["string", "null"]}
SUBJECT = {
    "type": ["object", "null"],
    "properties": {
        "type": {**TEXT, "description": 'the model, as "app_label.model"'},
        "id": {**TEXT, "description": "the primary key, as text"},
    },
    "required": ["type", "id"],
    "description": "the object the run belongs to (started with subject=obj), if any",
}
ANY: dict[str, Any] = {}
PAYLOAD: dict[str, Any] = {
    "description": "any JSON value of at most OPENWORKFLOW['MAX_PAYLOAD_BYTES'] (413 over it), nested at most 30 "
    "levels, its text without NUL characters or lone surrogates (400 bad_payload otherwise)"
}


def _nullable(schema: dict[str, Any], description: str = "") -> dict[str, Any]:
    """``schema`` or JSON null, which means the same as leaving the field out."""
    return {**schema, "type": [schema["type"], "null"], **({"description": description} if description else {})}


RUN = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "format": "uuid"},
        "workflow": TEXT,
        "version": OPTIONAL_TEXT,
        "status": {
            "enum": list(STATUS_FIELD_VALUES),
            "description": "the stored status, but parked for a running run no worker holds",
        },
        "display_status": {
            "enum": list(DISPLAY_STATUSES),
            "description": "what the admin and the CLI show: parked runs told apart as retrying, waiting or parked",
        },
        "attempts": {"type": "integer", "description": "failed workflow-level attempts"},
        "worker_id": OPTIONAL_TEXT,
        "idempotency_key": OPTIONAL_TEXT,
        "created_at": TIME,
        "started_at": TIME,
        "finished_at": TIME,
        "available_at": {**TIME, "description": "null while the run waits for a concurrency place"},
        "deadline_at": TIME,
        "queue": TEXT,
        "priority": {"type": "integer", "description": "the claim's order: the declared one, or higher once aged"},
        "declared_priority": {
            "type": "integer",
            "description": "the priority the run was started with (OPENWORKFLOW['PRIORITY_AGING'] raises priority)",
        },
        "concurrency_key": OPTIONAL_TEXT,
        "concurrency_limit": {"type": ["integer", "null"]},
        "concurrency_counts_parked": {"type": ["boolean", "null"]},
        "blocked_at": {**TIME, "description": "since when the run waits for a concurrency place"},
        "rate_key": OPTIONAL_TEXT,
        "rate_limit": {"type": ["integer", "null"]},
        "rate_period": {"type": ["number", "null"], "description": "seconds"},
        "debounce_key": OPTIONAL_TEXT,
        "retention_seconds": {"type": ["number", "null"]},
        "expires_at": TIME,
        "rerun_of": {"type": ["string", "null"], "format": "uuid", "description": "the run this one re-runs"},
        "rerun_from_step": {
            **OPTIONAL_TEXT,
            "description": "the step a re-run started from; the steps before it were copied from rerun_of",
        },
        "parent_close_policy": {
            "enum": [*ParentClosePolicy.values(), None],
            "description": "a child run: what its parent's end does to it if it has not finished; null for other runs",
        },
        "subject": SUBJECT,
        "erased": {
            "type": ["object", "null"],
            "required": ["at", "by"],
            "properties": {"at": {"type": "string", "format": "date-time"}, "by": TEXT},
            "description": "when forget erased the run's payloads, and who asked (by: a username, or empty); "
            "null for a run not erased",
        },
        "attributes": {
            "type": "object",
            "additionalProperties": {"type": ["integer", "string"]},
            "description": "the run's typed attributes by name: an int as a number, a str, a Decimal as a string "
            "(exact), a datetime as ISO 8601 in UTC; {} when it has none",
        },
        "input": {**ANY, "description": "only on a single run, not in lists"},
        "output": ANY,
        "error": {"type": ["object", "null"]},
    },
}
RUN["required"] = [name for name in RUN["properties"] if name not in ("input", "output", "error")]
STEP = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "step": TEXT,
        "kind": TEXT,
        "status": {"enum": ["running", "completed", "failed"]},
        "attempt": {"type": "integer", "description": "the attempt at this step, from 1"},
        "started_at": TIME,
        "finished_at": TIME,
        "output": ANY,
        "error": {"type": ["object", "null"]},
        "context": {"type": ["object", "null"]},
        "child_run_id": {"type": ["string", "null"], "format": "uuid"},
        "copied_from": {
            "type": ["integer", "null"],
            "description": "in a re-run from a step: the id of the attempt of the run it re-runs that this row copies",
        },
    },
}
STEP["required"] = list(STEP["properties"])
ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": {
                    "type": "string",
                    "description": "what a program can test: invalid, missing_field, unknown_field, "
                    "unknown_parameter, malformed_json, bad_request, bad_payload, bad_cursor, "
                    "out_of_range, bad_subject, bad_attribute (the last five: rules a JSON Schema cannot state), "
                    "not_authenticated, malformed_token, unknown_token, revoked_token, expired_token, inactive_user, "
                    "permission_denied, csrf_failed, not_found, unknown_workflow, no_such_endpoint, "
                    "method_not_allowed, refused, run_finished, too_large, not_json, count_changed, not_assigned, "
                    "already_decided, wrong_kind, invalid_form, form_unavailable",
                    "examples": ["invalid", "not_found", "refused", "permission_denied"],
                },
                "message": TEXT,
                "field": {**OPTIONAL_TEXT, "description": "the field or parameter at fault, if one is"},
                "errors": {
                    "type": "object",
                    "additionalProperties": {"type": "array", "items": TEXT},
                    "description": "invalid_form only: the form's messages by field, '__all__' for the form's own "
                    "clean()",
                },
            },
        }
    },
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict[str, Any]:
    why = {
        400: "bad input: malformed JSON, an unknown or missing field or parameter, a value of the wrong type, "
        "length, range or pattern; the error's field names it",
        401: "not logged in and no token (an Authorization header of another scheme than Bearer is ignored), "
        "or a Bearer token that is malformed, unknown, revoked or expired, or whose user is inactive (the code "
        "says which)",
        403: "no permission, or the CSRF check failed",
        404: "no such run or workflow",
        409: "the operation cannot apply to the run (the message says why); on runs/actions: count_changed, the "
        "filter matches more runs than confirm_count",
        413: "the request body or a payload is too large",
        415: "the body is not sent as application/json (forms and multipart bodies are never read)",
    }
    return {str(status): _answer(why[status], _ref("Error")) for status in (401, 403, *statuses)}


def _body(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    schema = {"type": "object", "required": required, "properties": properties, "additionalProperties": False}
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": schema}


RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    """An answer's object: every property always there."""
    return {"type": "object", "required": list(properties), "properties": properties}


RUN_ANSWER = _object({"run": _ref("Run")})


def _operation(
    summary: str, permission: str, ok: str = "200", statuses: tuple[int, ...] = (400, 404, 409, 413, 415)
) -> dict[str, Any]:
    """A POST on one run. By default it reads no body: a bare POST or ``{}`` as JSON, anything else refused."""
    return {
        "post": {
            "summary": summary,
            "description": f"Needs the {permission} permission on workflow runs.",
            "parameters": [RUN_ID],
            "responses": {ok: _answer("the run as it is now", RUN_ANSWER), **_errors(*statuses)},
        }
    }


DECISION = _object(
    {
        "approved": {"type": "boolean"},
        "by": {**TEXT, "description": "the username of who decided"},
        "at": {"type": "string", "format": "date-time"},
        "comment": TEXT,
        "approvers": {
            "type": "array",
            "items": TEXT,
            "description": "the usernames of everyone who approved so far, in order",
        },
        "remaining": {
            "type": "integer",
            "minimum": 0,
            "description": "how many more approvals the approval needs (approvals_required): the decision is "
            "delivered to the run once it is 0, or with a rejection",
        },
    }
)
APPROVAL = _object(
    {
        "id": {"type": "integer"},
        "name": TEXT,
        "details": {**TEXT, "description": "what is being approved"},
        "run_id": {"type": "string", "format": "uuid"},
        "workflow": TEXT,
        "subject": SUBJECT,
        "input": {"description": "the run's input"},
        "step": {**TEXT, "description": "the wait's step key in the run's journal"},
        "assignees": _object(
            {
                "users": {"type": "array", "items": TEXT},
                "groups": {"type": "array", "items": TEXT},
                "permissions": {"type": "array", "items": TEXT},
            }
        ),
        "created_at": TIME,
        "timeout_at": TIME,
        "due_at": {**TIME, "description": "when a task is due (it closes nothing); null when not set"},
        "approvals_required": {
            "type": "integer",
            "minimum": 1,
            "description": "how many distinct people must approve (a rejection by one rejects)",
        },
        "approved_by": {"type": "array", "items": TEXT, "description": "who approved so far, in order"},
        "overdue": {"type": "boolean", "description": "past its due_at (and not timed out): listed first"},
        "claimed_by": {"type": ["string", "null"], "description": "who holds it (claimed or reassigned); null: nobody"},
        "claimed_at": TIME,
        "escalate_at": {**TIME, "description": "when the escalation fires (escalate_after); null when none"},
        "escalated_at": {**TIME, "description": "when it fired; null until then"},
        "activity": {
            "type": "array",
            "items": {"type": "object"},
            "description": "claims, releases, reassignments, reminders, escalations and sign-offs, oldest first "
            "({action, by, at}, and from/to)",
        },
        "kind": {"enum": ["decision", "input"], "description": "a yes/no decision, or a task that asks for a form"},
        "form": {
            "type": ["object", "null"],
            "description": "a task's form, its fields as JSON Schema (2020-12): types, bounds, choices, titles, "
            "defaults, the required ones; null for a decision, or when the form cannot be shown (form_error)",
        },
        "form_error": {
            **OPTIONAL_TEXT,
            "description": "why a task's form cannot be shown: it no longer imports, or its fields changed since "
            "the task opened; a submission is refused with 409 form_unavailable meanwhile",
        },
    }
)
SUBMISSION = _object(
    {
        "data": {"type": "object", "description": "the form's cleaned data as JSON"},
        "by": {**TEXT, "description": "the username of who submitted it"},
        "at": {"type": "string", "format": "date-time"},
    }
)


COMMENT = {
    "type": ["string", "null"],
    "maxLength": COMMENT_LIMIT,
    "pattern": NO_NUL,
    "description": f"at most {COMMENT_LIMIT} characters, without NUL characters or lone surrogates (400 "
    "bad_payload for those); null or absent: none",
}


def approval_paths() -> dict[str, Any]:
    """``/approvals`` and deciding one (``approvals.py``)."""
    approval_id = {"name": "approval_id", "in": "path", "required": True, "schema": {"type": "integer"}}
    return {
        "/approvals": {
            "get": {
                "summary": "The open approvals the caller may decide, overdue first",
                "description": "Any authenticated user: the list holds the approvals assigned to them (by user, "
                "group or permission); a superuser sees them all. The overdue come first, then by due time, then "
                "the oldest.",
                "parameters": [
                    _query(
                        "scope",
                        "all (default): every one the caller may decide, those others hold included (claimed_by); "
                        "mine: held by the caller, or naming them and held by nobody; groups: held by nobody and "
                        "assigned to one of the caller's groups",
                        {"enum": ["all", "mine", "groups"]},
                    )
                ],
                "responses": {
                    "200": _answer("the approvals", _object({"approvals": {"type": "array", "items": APPROVAL}})),
                    **_errors(400),
                },
            }
        },
        "/approvals/{approval_id}/decide": {
            "post": {
                "summary": "Approve or reject an approval; the decision is delivered to its run",
                "description": "Any authenticated user among the approval's assignees (403 not_assigned "
                "otherwise, and for a user the approval excludes or who approved it already). The first decision "
                "wins: a later one is answered 409 already_decided, whose message names who decided first, and "
                "delivers nothing; an approval someone else claimed is 409 claimed, naming them, and "
                "delivers nothing; so is a decision on an approval that timed out or whose run has ended. An "
                "approval that needs several approvals records each one and answers with remaining > 0 until the "
                "last one needed, which is delivered with the list of approvers.",
                "parameters": [approval_id],
                "requestBody": _body(["approved"], {"approved": {"type": "boolean"}, "comment": COMMENT}),
                "responses": {
                    "200": _answer(
                        "the decision delivered", _object({"approval_id": {"type": "integer"}, "decision": DECISION})
                    ),
                    **_errors(400, 404, 409, 415),
                },
            }
        },
        "/approvals/{approval_id}/submit": {
            "post": {
                "summary": "Submit a task's form; its cleaned data is delivered to the run",
                "description": "Any authenticated user among the task's assignees (403 not_assigned otherwise). "
                "data holds the form's fields, as the task's form schema in GET approvals states them; the form "
                "validates them, its clean() included, and a refusal is 400 invalid_form whose errors give its "
                "messages by field. A yes/no approval is 400 wrong_kind. The first submission wins (409 "
                "already_decided, naming who submitted); a task someone else claimed is 409 claimed, naming "
                "them; a form that no longer imports, or whose fields changed "
                "since the task opened, is 409 form_unavailable. None of these delivers anything. A file field "
                "takes an object {name, content_base64, content_type?}: once the form is valid the file is saved "
                "to the task files' storage and the run receives {name, path, storage, size, content_type} in its "
                "place; a file that is not base64 or larger than TASK_FILE_MAX_BYTES is the field's error (400 "
                "invalid_form), and a refused submission leaves no file.",
                "parameters": [approval_id],
                "requestBody": _body(["data"], {"data": {"type": "object", "description": "the form's fields"}}),
                "responses": {
                    "200": _answer(
                        "the data delivered", _object({"approval_id": {"type": "integer"}, "submission": SUBMISSION})
                    ),
                    **_errors(400, 404, 409, 413, 415),
                },
            }
        },
    }
