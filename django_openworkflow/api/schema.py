"""The OpenAPI 3.1 description of the JSON HTTP API (served at ``api/openapi.json``).

Written by hand next to the views it describes; ``tests/api/test_views.py``
checks that every route is described and that answers carry the fields
the schemas name.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from .. import __version__
from ..store.queries import DISPLAY_STATUSES
from .fields import (
    LIMIT_SCHEMA,
    MOMENT_SCHEMA,
    NAME_SCHEMA,
    NO_NUL,
    OFFSET_SCHEMA,
    PRIORITY_SCHEMA,
    QUEUE_SCHEMA,
    STATUS_PATTERN,
    SUBJECT_SCHEMA,
    WHEN_SCHEMA,
)
from .schema_blocks import (
    ERROR,
    OPTIONAL_TEXT,
    PAYLOAD,
    RUN,
    RUN_ANSWER,
    RUN_ID,
    STEP,
    TEXT,
    _answer,
    _body,
    _errors,
    _nullable,
    _object,
    _operation,
    _query,
    _ref,
    approval_paths,
)
from .schema_schedules import SCHEDULE_SCHEMAS, schedule_paths
from .schema_tasks import task_paths
from .schema_workers import WORKER_SCHEMAS, worker_paths

ATTRIBUTE_FILTER_PATTERN = "^[a-z][a-z0-9_]{0,70}=[^\\u0000]*$"
"""``NAME[__LOOKUP]=VALUE``: the shape of an attribute filter (the declarations say which names and values)."""


def _rerun() -> dict[str, Any]:
    """The re-run: no body, or ``from_step`` to copy the steps before that one (``client/reruns.py``)."""
    rerun = _operation(
        "Start a new run with the same workflow, version and input", "add", "201", (400, 404, 409, 413, 415)
    )
    step = _nullable(NAME_SCHEMA, "re-run from this step: the steps recorded before it keep their results")
    rerun["post"]["requestBody"] = {**_body([], {"from_step": step}), "required": False}
    rerun["post"]["description"] += (
        " Without a body (or from_step null) every step runs again; with from_step, 409 when the steps before it"
        " cannot be replayed faithfully (a child run, a step that had not completed or was compensated)."
    )
    return rerun


FILTER_STATUS = {"type": "string", "pattern": STATUS_PATTERN}
FILTER = {
    "status": {
        "anyOf": [FILTER_STATUS, {"type": "array", "items": FILTER_STATUS}, {"type": "null"}],
        "description": "display statuses, as GET /runs takes them: comma-separated, or an array",
    },
    "workflow": _nullable(NAME_SCHEMA),
    "queue": _nullable(QUEUE_SCHEMA),
    "created_after": {"anyOf": [MOMENT_SCHEMA, {"type": "null"}], "description": "inclusive"},
    "created_before": {"anyOf": [MOMENT_SCHEMA, {"type": "null"}], "description": "exclusive"},
    "input": {
        "type": ["object", "null"],
        "description": "a JSON object the run's input contains, as GET /runs's input (400 bad_payload otherwise)",
    },
    "subject": {"anyOf": [SUBJECT_SCHEMA, {"type": "null"}], "description": "the runs linked to this object"},
}
"""The filter of an action on every matching run: GET /runs's parameters, as JSON."""


def _filter_action(summary: str, permission: str) -> dict[str, Any]:
    """An operation on every run a filter matches (``filter_actions.py``)."""
    properties = {
        **FILTER,
        "confirm_count": {
            "type": ["integer", "null"],
            "minimum": 0,
            "maximum": 2**53 - 1,
            "description": "the count a preview gave and the user confirmed; absent or null: only a preview, "
            "nothing done. 409 count_changed (nothing done) when the filter matches more runs now",
        },
    }
    answer = _object(
        {
            "action": TEXT,
            "done": {"type": "boolean", "description": "false: a preview, nothing was done"},
            "count": {"type": "integer", "description": "runs matched"},
            "changed": {"type": "integer", "description": "runs changed (re-run: started again), or that would be"},
            "refused": {"type": "integer", "description": "runs left alone, or that would be"},
            "reasons": {
                "type": "array",
                "items": _object({"reason": TEXT, "count": {"type": "integer"}}),
                "description": "why runs were (or would be) left alone, most first",
            },
            "created": {
                "type": "array",
                "items": {"type": "string", "format": "uuid"},
                "description": "re-run: the first 10 new runs",
            },
        }
    )
    return {
        "post": {
            "summary": summary,
            "description": f"Needs the {permission} permission on workflow runs. Without confirm_count: a preview. "
            "With it: applied by chunks of 500 runs, each chunk one transaction.",
            "requestBody": _body([], properties),
            "responses": {"200": _answer("what was done, or would be", answer), **_errors(400, 409, 413, 415)},
        }
    }


def _security_schemes() -> dict[str, Any]:
    """Django's session cookie with, for unsafe methods, the CSRF token in its header (named as settings name
    them); or an API token."""
    header = settings.CSRF_HEADER_NAME.removeprefix("HTTP_").replace("_", "-")
    return {
        "session": {
            "type": "apiKey",
            "in": "cookie",
            "name": settings.SESSION_COOKIE_NAME,
            "description": "Django's session: log in the way the site logs users in (401 without it)",
        },
        "csrf": {
            "type": "apiKey",
            "in": "header",
            "name": header,
            "description": f"Django's CSRF token (the {settings.CSRF_COOKIE_NAME} cookie's value, or the "
            "session's with CSRF_USE_SESSIONS), required on POST with a session (403 csrf_failed without it)",
        },
        "token": {
            "type": "http",
            "scheme": "bearer",
            "description": "an API token, created in the admin (API tokens) or with `manage.py workflows token "
            "create`: the request acts as the token's user, needs no CSRF token and ignores the session; a "
            "malformed, unknown, revoked or expired token is a 401. An Authorization header of another scheme "
            "(Basic, from a proxy in front of the site) or of no scheme is not the API's and is ignored on every "
            "operation: the session decides, and without one it is a 401",
        },
    }


def openapi_schema(prefix: str) -> dict[str, Any]:
    """The OpenAPI document, with paths under ``prefix`` (where the API is mounted, e.g. ``/workflows/api``)."""
    statuses = ", ".join(DISPLAY_STATUSES)
    paths: dict[str, Any] = {
        "/runs": {
            "get": {
                "summary": "List runs, newest first",
                "description": "Needs the view (or change) permission. Filters combine; pages by cursor.",
                "parameters": [
                    _query(
                        "status",
                        f"one or more of {statuses}, comma-separated or repeated",
                        {"type": "string", "pattern": STATUS_PATTERN},
                    ),
                    _query("workflow", "a workflow name", NAME_SCHEMA),
                    _query("queue", "a queue name", QUEUE_SCHEMA),
                    _query("created_after", "a date and time, inclusive", MOMENT_SCHEMA),
                    _query("created_before", "a date and time, exclusive", MOMENT_SCHEMA),
                    {
                        "name": "input",
                        "in": "query",
                        "description": 'a JSON object the run\'s input contains, e.g. {"customer": 42}: at most '
                        "16 levels and 64 values, keys without quotes or backslashes, text without NUL characters or "
                        "lone surrogates, integers within 64 bits (400 bad_payload otherwise)",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    _query("subject", "the runs linked to this object (started with subject=obj)", SUBJECT_SCHEMA),
                    {
                        **_query(
                            "attribute",
                            "a typed attribute's filter, NAME[__LOOKUP]=VALUE, compared as the attribute's declared "
                            "type: region=eu, amount__gte=10.5, due__lt=2026-12-01T00:00:00Z, customer_id__in=1,2 "
                            "(lookups eq, gt, gte, lt, lte, in); repeat for several, all must match "
                            "(400 bad_attribute for an undeclared attribute or a value not of its type)",
                            {"type": "array", "items": {"type": "string", "pattern": ATTRIBUTE_FILTER_PATTERN}},
                        ),
                        "explode": True,
                    },
                    _query("limit", "runs per page", LIMIT_SCHEMA),
                    _query("cursor", "the next_cursor of the previous page (400 bad_cursor otherwise)", NAME_SCHEMA),
                ],
                "responses": {
                    "200": _answer(
                        "a page of runs (without their payloads)",
                        _object(
                            {
                                "runs": {"type": "array", "items": _ref("Run")},
                                "next_cursor": OPTIONAL_TEXT,
                                "next": {**OPTIONAL_TEXT, "description": "the next page's URL"},
                            }
                        ),
                    ),
                    **_errors(400),
                },
            },
            "post": {
                "summary": "Start a run",
                "description": "Needs the add permission. 201 when it started a run, 200 when an idempotency key "
                "found the run it started before.",
                "requestBody": _body(
                    ["workflow"],
                    {
                        "workflow": {**NAME_SCHEMA, "description": "a registered workflow's name (404 otherwise)"},
                        "input": PAYLOAD,
                        "version": _nullable(NAME_SCHEMA, "a registered version; null or absent: the highest"),
                        "idempotency_key": _nullable(NAME_SCHEMA),
                        "available_at": {**WHEN_SCHEMA, "description": "when the run may start: a time, or a delay"},
                        "deadline_at": {
                            **WHEN_SCHEMA,
                            "description": "when the run fails unless finished: a time still ahead (400 "
                            "out_of_range otherwise), or a duration from now",
                        },
                        "queue": _nullable(QUEUE_SCHEMA, "the workflow's own queue when null or absent"),
                        "priority": _nullable(PRIORITY_SCHEMA, "the workflow's own priority when null or absent"),
                        "subject": {
                            "anyOf": [SUBJECT_SCHEMA, {"type": "null"}],
                            "description": "link the run to this object, which must exist (400 bad_subject otherwise)",
                        },
                        "attributes": {
                            "type": ["object", "null"],
                            "additionalProperties": {"type": ["integer", "string"], "pattern": NO_NUL},
                            "description": "values of the workflow's declared typed attributes: an int as a number, "
                            "a str, a Decimal or a datetime as a string (10.25, 2026-12-01T09:00:00Z); 400 "
                            "bad_attribute for an undeclared attribute or a value not of its type",
                        },
                    },
                ),
                "responses": {
                    "201": _answer(
                        "started",
                        _object({"run": _ref("Run"), "created": {"type": "boolean"}}),
                    ),
                    "200": _answer(
                        "the run this idempotency key started before",
                        _object({"run": _ref("Run"), "created": {"type": "boolean"}}),
                    ),
                    **_errors(400, 404, 413, 415),
                },
            },
        },
        "/runs/actions/cancel": _filter_action("Cancel every run a filter matches", "change"),
        "/runs/actions/retry": _filter_action(
            "Retry every failed run a filter matches, from its failed step", "change"
        ),
        "/runs/actions/retry-now": _filter_action("Make every run a filter matches due now", "change"),
        "/runs/actions/rerun": _filter_action("Start again every run a filter matches, with the same input", "add"),
        "/runs/{run_id}": {
            "get": {
                "summary": "One run, with its input, output and error",
                "parameters": [RUN_ID],
                "responses": {"200": _answer("the run", RUN_ANSWER), **_errors(404)},
            }
        },
        "/runs/{run_id}/steps": {
            "get": {
                "summary": "A run's journal: every step attempt in the order it was written",
                "parameters": [RUN_ID],
                "responses": {
                    "200": _answer(
                        "the journal",
                        _object({"run_id": TEXT, "steps": {"type": "array", "items": _ref("Step")}}),
                    ),
                    **_errors(404),
                },
            }
        },
        "/runs/{run_id}/cancel": _operation("Cancel a run", "change"),
        "/runs/{run_id}/retry": _operation("Retry a failed run from its failed step", "change"),
        "/runs/{run_id}/retry-now": _operation("Make a sleeping, backing-off or scheduled run due now", "change"),
        "/runs/{run_id}/rerun": _rerun(),
        "/runs/{run_id}/signals": {
            "post": {
                "summary": "Send a signal to a run",
                "description": "Needs the change permission. delivered: a wait took it now (else it is buffered).",
                "parameters": [RUN_ID],
                "requestBody": _body(
                    ["name"], {"name": NAME_SCHEMA, "data": PAYLOAD, "idempotency_key": _nullable(NAME_SCHEMA)}
                ),
                "responses": {
                    "200": _answer(
                        "sent",
                        _object({"run_id": TEXT, "signal": TEXT, "delivered": {"type": "boolean"}}),
                    ),
                    **_errors(400, 404, 409, 413, 415),
                },
            }
        },
        "/events": {
            "post": {
                "summary": "Publish an event",
                "description": "Needs the add and change permissions: an event wakes waiting runs and starts "
                "subscribed workflows.",
                "requestBody": _body(
                    ["event"], {"event": NAME_SCHEMA, "payload": PAYLOAD, "idempotency_key": _nullable(NAME_SCHEMA)}
                ),
                "responses": {
                    "200": _answer(
                        "published",
                        _object(
                            {
                                "event_id": {"type": "integer"},
                                "woke": {"type": "integer"},
                                "started": {"type": "array", "items": {"type": "string", "format": "uuid"}},
                                "repeat": {"type": "boolean"},
                            }
                        ),
                    ),
                    **_errors(400, 413, 415),
                },
            }
        },
        "/forget": {
            "post": {
                "summary": "Erase the payloads of an object's finished runs and of their child runs",
                "description": "Needs the delete permission on workflow runs. The runs stay, with their steps, "
                "statuses and times; their inputs, outputs, step results, errors' messages and tracebacks, signals', "
                "events' and published data, stream chunks and approvals' texts are erased. Runs that have not "
                "finished: 409 refused naming them, nothing erased, unless cancel_live cancels them first. "
                "Forgetting again erases nothing more.",
                "requestBody": _body(
                    ["subject"],
                    {
                        "subject": SUBJECT_SCHEMA,
                        "cancel_live": {"type": "boolean", "description": "cancel the unfinished runs first"},
                    },
                ),
                "responses": {
                    "200": _answer(
                        "erased",
                        _object(
                            {
                                "subject": TEXT,
                                **{
                                    name: {"type": "array", "items": {"type": "string", "format": "uuid"}}
                                    for name in ("erased", "already", "canceled")
                                },
                            }
                        ),
                    ),
                    **_errors(400, 409, 413, 415),
                },
            }
        },
        "/workflows": {
            "get": {
                "summary": "The workflow index: versions, queue and run counts by status",
                "responses": {
                    "200": _answer(
                        "every workflow registered here or with runs",
                        _object({"workflows": {"type": "array", "items": _ref("Workflow")}}),
                    ),
                    **_errors(),
                },
            }
        },
    }
    paths.update(worker_paths())
    paths.update(schedule_paths())
    paths["/runs/{run_id}/events"] = _events_path()
    paths.update(approval_paths())
    paths.update(task_paths())
    for operations in paths.values():
        if "post" in operations:
            operations["post"]["security"] = [{"session": [], "csrf": []}, {"token": []}]
    workflow = _object(
        {
            "name": TEXT,
            "registered": {"type": "boolean"},
            "versions": {"type": "array", "items": OPTIONAL_TEXT},
            "queue": OPTIONAL_TEXT,
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "total": {"type": "integer"},
            "runs": {**TEXT, "description": "the URL of its runs"},
        }
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "django-openworkflow",
            "version": __version__,
            "description": "Durable workflows: start, find, follow and operate runs. Django session "
            "authentication (unsafe methods need the CSRF token) or an API token as 'Authorization: Bearer', "
            "and the admin's model permissions.",
        },
        "servers": [{"url": prefix}],
        "security": [{"session": []}, {"token": []}],
        "paths": paths,
        "components": {
            "schemas": {
                "Run": RUN,
                "Step": STEP,
                "Error": ERROR,
                "Workflow": workflow,
                **WORKER_SCHEMAS,
                **SCHEDULE_SCHEMAS,
            },
            "securitySchemes": _security_schemes(),
        },
    }


def _events_path() -> dict[str, Any]:
    """The server-sent events of a run's progress (``stream.py``)."""
    return {
        "get": {
            "summary": "A run's published values and one of its streams, as server-sent events",
            "description": "Needs the view (or change) permission. text/event-stream: 'progress' (every published "
            "value, as one object, whenever one changes), 'chunk' (id: its offset; data: the chunk), 'end' "
            "(data: the run's status; the response ends). A connection lasts a minute at most: reconnect with "
            "Last-Event-ID (the last chunk's offset) and the stream goes on from the next chunk.",
            "parameters": [
                RUN_ID,
                _query("stream", "the stream to send; none: only the published values", NAME_SCHEMA),
                _query("offset", "the first chunk's offset (Last-Event-ID wins)", OFFSET_SCHEMA),
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "description": "the offset of the last chunk received: decimal digits only, never empty (400 "
                    "otherwise); leave the header out on a first connection",
                    "schema": OFFSET_SCHEMA,
                },
            ],
            "responses": {
                "200": {
                    "description": "the events",
                    "content": {
                        "text/event-stream": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "event": {"enum": ["progress", "chunk", "end"]},
                                    "data": {"type": "string", "description": "JSON"},
                                    "id": {"type": "string", "description": "a chunk's offset"},
                                },
                            }
                        }
                    },
                },
                **_errors(400, 404),
            },
        }
    }
