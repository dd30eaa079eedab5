"""The JSON HTTP API: runs, their journals and operations, signals, events and the workflow index.

Plain Django views, no framework: the API is a dozen endpoints over
functions that exist already (``listing``, ``client``, ``operations``), and
a bare install (Django only) serves it. ``schema.py`` describes it as
OpenAPI 3.1 at ``openapi.json``.

Who may call what: a logged-in user (Django's session authentication,
whatever logs users in), or the user of an API token sent as
``Authorization: Bearer`` (``tokens.py``), holding the admin's model
permissions on workflow runs: ``view`` (or ``change``) to read, ``add`` to
start and re-run, ``change`` to cancel, retry and signal, ``delete`` to erase
an object's runs' payloads (``forget``); publishing an
event, which can start and wake runs, needs both ``add`` and ``change``.
Unsafe methods with a session pass Django's CSRF check, which answers in
JSON here; with a token they need none. Every answer is JSON; an
error is ``{"error": {"code", "message", "field"}}`` with a 4xx status,
and a refused request has written nothing. ``fields.py`` reads every field
of a body or a query string before anything uses it, by the same rules the
OpenAPI document states.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, QueryDict
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from ..client import operations
from ..client.events import publish_event
from ..client.handle import RunHandle, send_signal
from ..client.listing import attempt_json, attribute_filters, list_runs, run_json
from ..client.runs import start_run
from ..client.subjects import find_subject
from ..conf import owf_settings
from ..definitions.registry import registry
from ..errors import (
    InvalidArgument,
    OperationRefused,
    PayloadError,
    PayloadTooLarge,
    RunNotFound,
    SignalError,
    UnknownWorkflowError,
)
from ..formatting import numbered, read_json
from ..store import queries, run_states
from ..store.attributes import attributes_of
from . import fields, tokens
from .fields import ApiError, json_response

APP = "django_openworkflow"
PERMISSIONS = {
    "view": (f"{APP}.view_workflowrun", f"{APP}.change_workflowrun"),  # either
    "add": (f"{APP}.add_workflowrun",),
    "change": (f"{APP}.change_workflowrun",),
    "add+change": (f"{APP}.add_workflowrun", f"{APP}.change_workflowrun"),  # both
    "delete": (f"{APP}.delete_workflowrun",),  # forget: erase payloads (api/erasure.py)
    "user": (),  # any user: what they may see and do is checked per object (approvals)
}
View = TypeVar("View", bound=Callable[..., HttpResponseBase])
BODY_OVERHEAD = 64 * 1024
"""What a request body may hold besides its payload (names, keys, JSON punctuation)."""


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, giving back the reason it rejects a request instead of its HTML page."""

    def _reject(self, request: HttpRequest, reason: str) -> Any:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    """Why Django's CSRF check refuses ``request``, or None when it passes.

    The API reads no forms, so the token comes in the header: the body is
    never parsed as one (a multipart body without a boundary, or a huge
    form, would otherwise fail inside Django's check with its HTML page).
    """
    request.POST = QueryDict()  # WSGIRequest and ASGIRequest define its setter
    reason: Any = _CsrfCheck(HttpResponse).process_view(request, HttpResponse, (), {})
    return reason


def _allowed(request: HttpRequest, permission: str) -> bool:
    user = request.user
    names = PERMISSIONS[permission]
    if not names:  # any authenticated user (a custom user model may have no has_perms)
        return True
    if permission == "view":
        return any(user.has_perm(name) for name in names)
    return user.has_perms(names)


def endpoint(**methods: str) -> Callable[[View], View]:
    """A view answering ``methods`` (``GET="view"``: the method and the permission it needs), errors as JSON."""

    def decorate(view: View) -> View:
        @csrf_exempt  # checked below, after authentication, so that a failure is answered in JSON too
        @never_cache
        @functools.wraps(view)
        def wrapped(request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
            try:
                permission = methods.get(request.method or "")
                if permission is None:
                    allowed = ", ".join(methods)
                    response = ApiError(
                        405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}"
                    ).response()
                    response["Allow"] = allowed
                    return response
                token = tokens.bearer_token(request)
                if token is not None:  # the token alone decides, whatever session the request also has
                    request.user = tokens.authenticate(token)
                elif not request.user.is_authenticated:
                    raise ApiError(
                        401,
                        "not_authenticated",
                        "log in first, or send an API token in an 'Authorization: Bearer' header",
                    )
                if not _allowed(request, permission):
                    needed = " and ".join(PERMISSIONS[permission]) if "+" in permission else PERMISSIONS[permission][0]
                    raise ApiError(403, "permission_denied", f"this needs the {needed} permission")
                if request.method != "GET" and token is None:  # no browser sends a token by itself
                    reason = _csrf_failure(request)
                    if reason is not None:
                        raise ApiError(403, "csrf_failed", f"the CSRF check failed: {reason}")
                return view(request, **kwargs)
            except ApiError as exc:
                response = exc.response()
                if exc.status == 401:
                    response["WWW-Authenticate"] = tokens.challenge(exc)
                return response
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
            except RequestDataTooBig:
                return ApiError(
                    413, "too_large", "the request body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE"
                ).response()
            except (BadRequest, SuspiciousOperation) as exc:  # what Django itself refuses in a request
                return ApiError(400, "bad_request", f"the request cannot be read: {exc}").response()

        return cast(View, wrapped)

    return decorate


# -- reading a request ----------------------------------------------------------------


def _body(request: HttpRequest, allowed: dict[str, bool], extra: int | None = 0) -> dict[str, Any]:
    """The request's JSON object, with only the ``allowed`` fields (name -> required) in it; types unchecked.

    ``extra``: bytes the body may hold besides a payload (a task's files, base64); None: no limit of ours
    (Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` still applies).
    """
    limit = owf_settings.max_payload_bytes + BODY_OVERHEAD + (extra or 0)
    length = request.headers.get("Content-Length") or "0"
    if extra is not None and length.isascii() and length.isdigit() and int(length) > limit:
        raise ApiError(413, "too_large", f"the request body is {int(length)} bytes; the most this API reads is {limit}")
    if request.content_type != "application/json":
        raise ApiError(415, "not_json", "send a JSON object, with Content-Type: application/json")
    raw = request.body  # RequestDataTooBig: a 413 (endpoint)
    if extra is not None and len(raw) > limit:
        raise ApiError(413, "too_large", f"the request body is {len(raw)} bytes; the most this API reads is {limit}")
    try:
        data = read_json(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ApiError(400, "malformed_json", f"the request body is not UTF-8 text: {exc}") from None
    except ValueError as exc:
        raise ApiError(400, "malformed_json", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "malformed_json", f"the request body must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ApiError(
            400, "unknown_field", f"unknown field {unknown[0]!r:.80}; expected {', '.join(allowed)}", unknown[0]
        )
    for name, required in allowed.items():
        if required and name not in data:
            raise ApiError(400, "missing_field", f"the field {name!r} is required", name)
    return data


def _run_handle(run_id: str) -> RunHandle:
    parsed = queries.parse_run_id(run_id)
    if parsed is None:
        raise RunNotFound(f"{run_id!r:.80} is not a workflow run id")
    return RunHandle(parsed)


def _run(run_id: Any, status: int = 200, **extra: Any) -> HttpResponse:
    run = RunHandle(run_id).fetch()
    return json_response({"run": run_json(run), **extra}, status)


# -- runs -------------------------------------------------------------------------------

LIST_PARAMETERS = (
    "status",
    "workflow",
    "queue",
    "created_after",
    "created_before",
    "input",
    "subject",
    "attribute",
    "limit",
    "cursor",
)


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
    pattern = None
    if "input" in query:
        try:
            pattern = read_json(query["input"])
        except ValueError as exc:
            raise ApiError(400, "invalid", f"input must be a JSON object: {exc}", "input") from None
        if not isinstance(pattern, dict):
            raise ApiError(400, "invalid", f"input must be a JSON object, not {type(pattern).__name__}", "input")
    try:
        page = list_runs(
            status=fields.statuses(query.getlist("status")),
            workflow=fields.name(query, "workflow"),
            queue=fields.queue(query.get("queue")),
            created_after=_moment(query, "created_after"),
            created_before=_moment(query, "created_before"),
            input_contains=pattern,
            subject=fields.subject(query.get("subject")),
            attributes=attribute_filters(query.getlist("attribute"), "attribute"),
            attributes_as_text=True,
            limit=fields.limit(query.get("limit", "50")),
            cursor=fields.name(query, "cursor"),
        )
    except InvalidArgument as exc:
        if exc.argument == "attributes":  # checked against the declarations: no schema can say
            raise ApiError(400, "bad_attribute", str(exc), "attribute") from None
        if exc.argument == "input_contains":  # an object no database can compare (see containment.py)
            raise ApiError(400, "bad_payload", str(exc), "input") from None
        if exc.argument == "subject":  # no installed model, or no primary key of it: no schema can say
            raise ApiError(400, "bad_subject", str(exc), "subject") from None
        if exc.argument == "cursor":  # opaque: no schema can say which strings are cursors
            raise ApiError(400, "bad_cursor", str(exc), "cursor") from None
        raise
    following = None
    if page.next_cursor is not None:
        params = query.copy()
        params["cursor"] = page.next_cursor
        following = f"{request.path}?{params.urlencode()}"
    states = run_states.states_of(page.runs)
    attributes = attributes_of(run.id for run in page.runs)
    return json_response(
        {
            "runs": [
                run_json(run, payloads=False, state=states[run.id], attributes=attributes[run.id]) for run in page.runs
            ],
            "next_cursor": page.next_cursor,
            "next": following,
        }
    )


def _moment(query: Any, name: str) -> Any:
    return fields.moment(query[name], name) if name in query else None


START_FIELDS = {
    "workflow": True,
    "input": False,
    "version": False,
    "idempotency_key": False,
    "available_at": False,
    "deadline_at": False,
    "queue": False,
    "priority": False,
    "subject": False,
    "attributes": False,
}


def _start(request: HttpRequest) -> HttpResponse:
    data = _body(request, START_FIELDS)
    workflow = fields.required_name(data, "workflow")
    deadline = fields.when(data, "deadline_at")
    fields.future(deadline, "deadline_at")
    text = fields.subject(data.get("subject"))
    try:
        subject = None if text is None else find_subject(text)
    except InvalidArgument as exc:
        raise ApiError(400, "bad_subject", str(exc), "subject") from None
    version = fields.name(data, "version")
    try:
        attributes = registry.find(workflow, version).attribute_values_from_json(data.get("attributes"))
        handle = start_run(
            workflow,
            data.get("input"),
            subject=subject,
            attributes=attributes,
            version=version,
            idempotency_key=fields.name(data, "idempotency_key"),
            available_at=fields.when(data, "available_at"),
            deadline_at=deadline,
            queue=fields.queue(data.get("queue")),
            priority=fields.priority(data.get("priority")),
        )
    except InvalidArgument as exc:
        if exc.argument == "attributes":  # checked against the declaration: no schema can say
            raise ApiError(400, "bad_attribute", str(exc), "attributes") from None
        raise
    return _run(handle.id, 201 if handle.created else 200, created=handle.created)


@endpoint(GET="view")
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    """One run with its input, output and error."""
    return _run(_run_handle(run_id).id)


@endpoint(GET="view")
def run_steps(request: HttpRequest, run_id: str) -> HttpResponse:
    """A run's journal: every step attempt in the order it was written."""
    run = _run_handle(run_id).fetch()
    steps = [attempt_json(attempt, number) for attempt, number in numbered(queries.journal(run.id))]
    return json_response({"run_id": str(run.id), "steps": steps})


OPERATIONS: dict[str, Callable[[Any], Any]] = {
    "cancel": operations.cancel,
    "retry": operations.retry_from_failed_step,
    "retry-now": operations.retry_now,
}


def _no_body(request: HttpRequest) -> None:
    """An endpoint that reads no body: none, or a JSON object with no field; a form or other body is a 415.

    A client that sent a form meant something by it: refused, nothing done, rather than done as if unsent.
    """
    if request.body:  # RequestDataTooBig: a 413 (endpoint)
        _body(request, {})  # 415 unless JSON; 400 for JSON that is not {}


def _operation(name: str) -> Callable[..., HttpResponse]:
    @endpoint(POST="change")
    def view(request: HttpRequest, run_id: str) -> HttpResponse:
        handle = _run_handle(run_id)
        _no_body(request)
        OPERATIONS[name](handle.id)
        return _run(handle.id)

    view.__name__ = view.__qualname__ = f"run_{name.replace('-', '_')}"
    view.__doc__ = f"POST: {name} the run (operations.py); 409 with the reason when it cannot apply."
    return view


run_cancel, run_retry, run_retry_now = (_operation(name) for name in OPERATIONS)


@endpoint(POST="add")
def run_rerun(request: HttpRequest, run_id: str) -> HttpResponse:
    """A new run of the same workflow, version and input; ``{"from_step": ...}`` copies the steps before that one."""
    handle = _run_handle(run_id)
    step = None
    if request.headers.get("Content-Length", "0").strip() not in ("", "0"):  # no body: a plain re-run
        step = fields.name(_body(request, {"from_step": False}), "from_step")
    new_id = operations.rerun(handle.id) if step is None else operations.rerun_from_step(handle.id, step)
    return _run(new_id, 201)


@endpoint(POST="change")
def run_signal(request: HttpRequest, run_id: str) -> HttpResponse:
    """Send a signal to the run: delivered now to its open wait, or buffered for it."""
    handle = _run_handle(run_id)
    data = _body(request, {"name": True, "data": False, "idempotency_key": False})
    name = fields.required_name(data, "name")
    delivered = send_signal(handle.id, name, data.get("data"), fields.name(data, "idempotency_key"))
    return json_response({"run_id": str(handle.id), "signal": name, "delivered": delivered})


# -- events and workflows ---------------------------------------------------------------------


@endpoint(POST="add+change")
def events(request: HttpRequest) -> HttpResponse:
    """Publish an event: it wakes the runs waiting for it and starts the workflows subscribed to it."""
    data = _body(request, {"event": True, "payload": False, "idempotency_key": False})
    event = fields.required_name(data, "event")
    published = publish_event(event, data.get("payload"), fields.name(data, "idempotency_key"))
    return json_response(
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
    return json_response({"workflows": index})


@never_cache
def openapi(request: HttpRequest) -> HttpResponse:
    """The API described as OpenAPI 3.1 (readable by anyone: it holds no data)."""
    from .schema import openapi_schema

    return JsonResponse(openapi_schema(reverse(f"{APP}:api-runs").rsplit("/runs", 1)[0]))


def not_found(request: HttpRequest, rest: str) -> HttpResponse:
    """Any other path under the API: a JSON 404 rather than the site's HTML page."""
    return ApiError(404, "no_such_endpoint", f"no API endpoint at {request.path!r:.200}").response()
