"""The JSON HTTP API: runs, their journals and operations, signals, events and the workflow index.

Plain Django views, no framework: the API is a dozen endpoints over
functions that exist already (``listing``, ``client``, ``operations``), and
a bare install (Django only) serves it. ``schema.py`` describes it as
OpenAPI 3.1 at ``openapi.json``.

Who may call what: a logged-in user (Django's session authentication,
whatever logs users in) holding the admin's model permissions on workflow
runs: ``view`` (or ``change``) to read, ``add`` to start and re-run,
``change`` to cancel, retry and signal; publishing an event, which can
start and wake runs, needs both ``add`` and ``change``. Unsafe methods pass
Django's CSRF check, which answers in JSON here. Every answer is JSON; an
error is ``{"error": {"code", "message", "field"}}`` with a 4xx status,
and a refused request has written nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from .. import operations
from ..client import RunHandle, publish_event, send_signal, start_run
from ..conf import owf_settings
from ..errors import (
    InvalidArgument,
    OperationRefused,
    PayloadError,
    PayloadTooLarge,
    RunNotFound,
    SignalError,
    UnknownWorkflowError,
)
from ..formatting import json_text, numbered, read_json
from ..listing import attempt_json, list_runs, parse_moment, run_json
from ..registry import registry
from ..store import queries

APP = "django_openworkflow"
PERMISSIONS = {
    "view": (f"{APP}.view_workflowrun", f"{APP}.change_workflowrun"),  # either
    "add": (f"{APP}.add_workflowrun",),
    "change": (f"{APP}.change_workflowrun",),
    "add+change": (f"{APP}.add_workflowrun", f"{APP}.change_workflowrun"),  # both
}
BODY_OVERHEAD = 64 * 1024
"""What a request body may hold besides its payload (names, keys, JSON punctuation)."""


class ApiError(Exception):
    """An answer other than success: its status, a code a program can test, a message a person can read."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field

    def response(self) -> HttpResponse:
        body = {"error": {"code": self.code, "message": self.message, "field": self.field}}
        return _json(body, self.status)


def _json(data: Any, status: int = 200) -> HttpResponse:
    # json_text: datetimes as ISO 8601, non-ASCII readable, control characters escaped.
    return HttpResponse(json_text(data), status=status, content_type="application/json")


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, giving back the reason it rejects a request instead of its HTML page."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    """Why Django's CSRF check refuses ``request``, or None when it passes."""
    reason: Any = _CsrfCheck(HttpResponse).process_view(request, HttpResponse, (), {})
    return reason


def _allowed(request: HttpRequest, permission: str) -> bool:
    user = request.user
    names = PERMISSIONS[permission]
    if permission == "view":
        return any(user.has_perm(name) for name in names)
    return user.has_perms(names)


def endpoint(**methods: str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A view answering ``methods`` (``GET="view"``: the method and the permission it needs), errors as JSON."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt  # checked below, after authentication, so that a failure is answered in JSON too
        @never_cache
        @functools.wraps(view)
        def wrapped(request: HttpRequest, **kwargs: Any) -> HttpResponse:
            try:
                permission = methods.get(request.method or "")
                if permission is None:
                    allowed = ", ".join(methods)
                    response = ApiError(
                        405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}"
                    ).response()
                    response["Allow"] = allowed
                    return response
                if not request.user.is_authenticated:
                    raise ApiError(401, "not_authenticated", "log in first: the API uses Django's authentication")
                if not _allowed(request, permission):
                    needed = " and ".join(PERMISSIONS[permission]) if "+" in permission else PERMISSIONS[permission][0]
                    raise ApiError(403, "permission_denied", f"this needs the {needed} permission")
                if request.method != "GET":
                    reason = _csrf_failure(request)
                    if reason is not None:
                        raise ApiError(403, "csrf_failed", f"the CSRF check failed: {reason}")
                return view(request, **kwargs)
            except ApiError as exc:
                return exc.response()
            except RunNotFound as exc:
                return ApiError(404, "not_found", str(exc)).response()
            except UnknownWorkflowError as exc:
                return ApiError(404, "unknown_workflow", str(exc), "workflow").response()
            except OperationRefused as exc:
                return ApiError(409, "refused", str(exc)).response()
            except SignalError as exc:
                return ApiError(409, "run_finished", str(exc)).response()
            except PayloadTooLarge as exc:
                return ApiError(413, "too_large", str(exc), exc.argument).response()
            except PayloadError as exc:
                return ApiError(400, "bad_payload", str(exc), exc.argument).response()
            except InvalidArgument as exc:
                return ApiError(400, "invalid", str(exc), exc.argument).response()

        return wrapped

    return decorate


# -- reading a request ----------------------------------------------------------------


def _body(request: HttpRequest, fields: dict[str, bool]) -> dict[str, Any]:
    """The request's JSON object, with only ``fields`` (name -> required) in it."""
    limit = owf_settings.max_payload_bytes + BODY_OVERHEAD
    length = request.headers.get("Content-Length") or "0"
    if length.isdigit() and int(length) > limit:
        raise ApiError(413, "too_large", f"the request body is {int(length)} bytes; the most this API reads is {limit}")
    if request.content_type != "application/json":
        raise ApiError(415, "not_json", "send a JSON object, with Content-Type: application/json")
    try:
        raw = request.body
    except RequestDataTooBig:
        raise ApiError(413, "too_large", "the request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE") from None
    if len(raw) > limit:
        raise ApiError(413, "too_large", f"the request body is {len(raw)} bytes; the most this API reads is {limit}")
    try:
        data = read_json(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(400, "malformed_json", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_json", f"the request body must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ApiError(
            400, "unknown_field", f"unknown field {unknown[0]!r:.80}; expected {', '.join(fields)}", unknown[0]
        )
    for name, required in fields.items():
        if required and name not in data:
            raise ApiError(400, "missing_field", f"the field {name!r} is required", name)
    return data


def _text(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is not None and not isinstance(value, str):
        raise ApiError(400, "invalid", f"{name} must be a string, not {type(value).__name__}", name)
    return value


def _run_handle(run_id: str) -> RunHandle:
    parsed = queries.parse_run_id(run_id)
    if parsed is None:
        raise RunNotFound(f"{run_id!r:.80} is not a workflow run id")
    return RunHandle(parsed)


def _run(run_id: Any, status: int = 200, **extra: Any) -> HttpResponse:
    run = RunHandle(run_id).fetch()
    return _json({"run": run_json(run), **extra}, status)


# -- runs -------------------------------------------------------------------------------

LIST_PARAMETERS = ("status", "workflow", "queue", "created_after", "created_before", "input", "limit", "cursor")


@endpoint(GET="view", POST="add")
def runs(request: HttpRequest) -> HttpResponse:
    """GET: the newest runs, filtered and paged. POST: start a run."""
    if request.method == "POST":
        return _start(request)
    query = request.GET
    unknown = sorted(set(query) - set(LIST_PARAMETERS))
    if unknown:
        message = f"unknown parameter {unknown[0]!r:.80}; expected {', '.join(LIST_PARAMETERS)}"
        raise ApiError(400, "unknown_parameter", message, unknown[0])
    statuses = [s.strip() for value in query.getlist("status") for s in value.split(",") if s.strip()]
    pattern = None
    if "input" in query:
        try:
            pattern = read_json(query["input"])
        except ValueError as exc:
            raise ApiError(400, "invalid", f"input must be a JSON object: {exc}", "input") from None
    limit_text = query.get("limit", "50")
    if not limit_text.isdigit():
        raise ApiError(400, "invalid", f"limit must be a whole number, got {limit_text!r:.40}", "limit")
    try:
        page = list_runs(
            status=statuses,
            workflow=query.get("workflow"),
            queue=query.get("queue"),
            created_after=_moment(query, "created_after"),
            created_before=_moment(query, "created_before"),
            input_contains=pattern,
            limit=int(limit_text),
            cursor=query.get("cursor"),
        )
    except InvalidArgument as exc:
        if exc.argument == "input_contains":
            raise ApiError(400, "invalid", str(exc), "input") from None
        raise
    following = None
    if page.next_cursor is not None:
        params = query.copy()
        params["cursor"] = page.next_cursor
        following = f"{request.path}?{params.urlencode()}"
    return _json(
        {
            "runs": [run_json(run, payloads=False) for run in page.runs],
            "next_cursor": page.next_cursor,
            "next": following,
        }
    )


def _moment(query: Any, name: str) -> Any:
    return parse_moment(query[name], name) if name in query else None


START_FIELDS = {
    "workflow": True,
    "input": False,
    "version": False,
    "idempotency_key": False,
    "available_at": False,
    "deadline_at": False,
    "queue": False,
    "priority": False,
}


def _start(request: HttpRequest) -> HttpResponse:
    data = _body(request, START_FIELDS)
    name = _text(data, "workflow")
    assert name is not None  # required
    priority = data.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ApiError(400, "invalid", f"priority must be a whole number, not {priority!r:.40}", "priority")
    handle = start_run(
        name,
        data.get("input"),
        version=_text(data, "version"),
        idempotency_key=_text(data, "idempotency_key"),
        available_at=_when(data, "available_at"),
        deadline_at=_when(data, "deadline_at"),
        queue=_text(data, "queue"),
        priority=priority,
    )
    return _run(handle.id, 201 if handle.created else 200, created=handle.created)


def _when(data: dict[str, Any], name: str) -> Any:
    """A time field: an ISO 8601 date and time, or a duration from now such as "10m"."""
    text = _text(data, name)
    if text is None:
        return None
    try:
        return parse_moment(text, name)
    except InvalidArgument:
        return text  # a duration, or start_run says what is wrong with it


@endpoint(GET="view")
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """One run with its input, output and error."""
    return _run(_run_handle(run_id).id)


@endpoint(GET="view")
def run_steps(request: HttpRequest, run_id: str) -> HttpResponse:
    """A run's journal: every step attempt in the order it was written."""
    run = _run_handle(run_id).fetch()
    steps = [attempt_json(attempt, number) for attempt, number in numbered(queries.journal(run.id))]
    return _json({"run_id": str(run.id), "steps": steps})


OPERATIONS: dict[str, Callable[[Any], Any]] = {
    "cancel": operations.cancel,
    "retry": operations.retry_from_failed_step,
    "retry-now": operations.retry_now,
}


def _operation(name: str) -> Callable[..., HttpResponse]:
    @endpoint(POST="change")
    def view(request: HttpRequest, run_id: str) -> HttpResponse:
        handle = _run_handle(run_id)
        OPERATIONS[name](handle.id)
        return _run(handle.id)

    view.__name__ = view.__qualname__ = f"run_{name.replace('-', '_')}"
    view.__doc__ = f"POST: {name} the run (operations.py); 409 with the reason when it cannot apply."
    return view


run_cancel, run_retry, run_retry_now = (_operation(name) for name in OPERATIONS)


@endpoint(POST="add")
def run_rerun(request: HttpRequest, run_id: str) -> HttpResponse:
    """A new run of the same workflow, version and input."""
    new_id = operations.rerun(_run_handle(run_id).id)
    return _run(new_id, 201)


@endpoint(POST="change")
def run_signal(request: HttpRequest, run_id: str) -> HttpResponse:
    """Send a signal to the run: delivered now to its open wait, or buffered for it."""
    handle = _run_handle(run_id)
    data = _body(request, {"name": True, "data": False, "idempotency_key": False})
    name = _text(data, "name")
    assert name is not None  # required
    delivered = send_signal(handle.id, name, data.get("data"), _text(data, "idempotency_key"))
    return _json({"run_id": str(handle.id), "signal": name, "delivered": delivered})


# -- events and workflows ---------------------------------------------------------------------


@endpoint(POST="add+change")
def events(request: HttpRequest) -> HttpResponse:
    """Publish an event: it wakes the runs waiting for it and starts the workflows subscribed to it."""
    data = _body(request, {"event": True, "payload": False, "idempotency_key": False})
    event = _text(data, "event")
    assert event is not None  # required
    published = publish_event(event, data.get("payload"), _text(data, "idempotency_key"))
    return _json(
        {
            "event_id": published.event_id,
            "woke": published.woke,
            "started": [str(handle.id) for handle in published.started],
            "repeat": published.repeat,
        }
    )


@endpoint(GET="view")
def workflows(request: HttpRequest) -> HttpResponse:
    """Every workflow registered here or with runs in the database: its versions, queue and run counts."""
    counts = {stats.workflow_name: stats for stats in queries.stats_by_workflow()}
    specs: dict[str, list[Any]] = {}
    for spec in registry.all():
        specs.setdefault(spec.name, []).append(spec)
    index = []
    for name in sorted(set(specs) | set(counts)):
        versions = specs.get(name, [])
        latest = registry.latest(name) if versions else None
        stats = counts.get(name)
        index.append(
            {
                "name": name,
                "registered": bool(versions),
                "versions": [spec.version for spec in versions],
                "queue": latest.queue if latest else None,
                "counts": stats.counts if stats else {},
                "total": stats.total if stats else 0,
                "runs": f"{reverse(f'{APP}:api-runs')}?{urlencode({'workflow': name})}",
            }
        )
    return _json({"workflows": index})


@never_cache
def openapi(request: HttpRequest) -> HttpResponse:
    """The API described as OpenAPI 3.1 (readable by anyone: it holds no data)."""
    from .schema import openapi_schema

    return JsonResponse(openapi_schema(reverse(f"{APP}:api-runs").rsplit("/runs", 1)[0]))


def not_found(request: HttpRequest, rest: str) -> HttpResponse:
    """Any other path under the API: a JSON 404 rather than the site's HTML page."""
    return ApiError(404, "no_such_endpoint", f"no API endpoint at {request.path!r:.200}").response()
