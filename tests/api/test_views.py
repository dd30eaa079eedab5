"""The JSON HTTP API: every endpoint's permissions, answers and errors, and one session through a real server."""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connections
from django.test import Client
from django.urls import URLPattern

from django_openworkflow.api import urls as api_urls
from django_openworkflow.client.listing import run_json
from django_openworkflow.conf import owf_settings
from django_openworkflow.models import Event, Signal, StepAttempt, WorkflowRun
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)

API = "/workflows/api"
JSON = "application/json"


def make_user(django_user_model: Any, *actions: str, name: str = "staff") -> Any:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for action in actions:
        user.user_permissions.add(
            Permission.objects.get(codename=f"{action}_workflowrun", content_type__app_label="django_openworkflow")
        )
    return user


@pytest.fixture
def api(django_user_model: Any) -> Any:
    """A client logged in as a staff user holding the given permissions ("view", "add", "change")."""

    def login(*actions: str) -> Client:
        client = Client()
        client.force_login(make_user(django_user_model, *actions, name=f"staff-{uuid.uuid4().hex[:8]}"))
        return client

    return login


def post(client: Client, path: str, data: Any = None, **extra: Any) -> Any:
    return client.post(f"{API}{path}", json.dumps(data if data is not None else {}), content_type=JSON, **extra)


def error_of(response: Any) -> dict[str, Any]:
    assert response["Content-Type"] == JSON
    return response.json()["error"]


def written() -> tuple[int, ...]:
    """What the database holds: runs, step attempts, signals, events (a refused request changes none).

    One statement: test_schema.py asks before and after each of some 5,000 requests, and
    four ``count()`` queries each time were a fifth of that module's CPU.
    """
    connection = connections[owf_settings.database]
    tables = (model._meta.db_table for model in (WorkflowRun, StepAttempt, Signal, Event))
    counts = ", ".join(f"(SELECT COUNT(*) FROM {connection.ops.quote_name(table)})" for table in tables)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {counts}")
        return tuple(cursor.fetchone())


# -- permissions: every endpoint, anonymous, without and with the permission --------------

# (method, path, body, the permissions that let it through, the status then)
ENDPOINTS: list[tuple[str, str, Any, tuple[str, ...], int]] = [
    ("get", "/runs", None, ("view",), 200),
    ("post", "/runs", {"workflow": "three-steps", "input": {"start": 2}}, ("add",), 201),
    ("get", "/runs/{run}", None, ("view",), 200),
    ("get", "/runs/{run}/steps", None, ("view",), 200),
    ("post", "/runs/{run}/cancel", {}, ("change",), 200),
    ("post", "/runs/{run}/retry-now", {}, ("change",), 409),  # due already: refused, but allowed
    ("post", "/runs/{run}/retry", {}, ("change",), 409),  # not failed
    ("post", "/runs/{run}/rerun", {}, ("add",), 201),
    ("post", "/runs/{run}/signals", {"name": "go"}, ("change",), 200),
    ("post", "/events", {"event": "order.paid"}, ("add", "change"), 200),
    ("get", "/workflows", None, ("view",), 200),
]
IDS = [f"{method} {path}" for method, path, *_ in ENDPOINTS]


def call(client: Client, method: str, path: str, body: Any, run_id: Any) -> Any:
    path = path.format(run=run_id)
    if method == "get":
        return client.get(f"{API}{path}")
    return post(client, path, body)


@pytest.mark.parametrize(("method", "path", "body", "needs", "status"), ENDPOINTS, ids=IDS)
def test_anonymous_gets_401(method: str, path: str, body: Any, needs: Any, status: int) -> None:
    run = three_steps.run({"start": 1})
    before = written()
    response = call(Client(), method, path, body, run.id)
    assert response.status_code == 401 and error_of(response)["code"] == "not_authenticated"
    assert written() == before


@pytest.mark.parametrize(("method", "path", "body", "needs", "status"), ENDPOINTS, ids=IDS)
def test_staff_without_the_permission_gets_403(
    api: Any, method: str, path: str, body: Any, needs: Any, status: int
) -> None:
    run = three_steps.run({"start": 1})
    others = [action for action in ("view", "add", "change") if action not in needs]
    # Holding every other permission, and all but one of several it needs, is not enough.
    for held in [others, *([[*others, need] for need in needs] if len(needs) > 1 else [])]:
        if "change" in held and needs == ("view",):
            continue  # change lets a user read, as in the admin
        before = written()
        response = call(api(*held), method, path, body, run.id)
        assert response.status_code == 403, held
        assert error_of(response)["code"] == "permission_denied" and needs[-1] in error_of(response)["message"]
        assert written() == before


@pytest.mark.parametrize(("method", "path", "body", "needs", "status"), ENDPOINTS, ids=IDS)
def test_staff_with_the_permission_gets_through(
    api: Any, method: str, path: str, body: Any, needs: Any, status: int
) -> None:
    run = three_steps.run({"start": 1})
    response = call(api(*needs), method, path, body, run.id)
    assert response.status_code == status, response.content
    assert response["Content-Type"] == JSON


def test_change_lets_a_user_read_as_in_the_admin(api: Any) -> None:
    assert api("change").get(f"{API}/runs").status_code == 200


# -- answers ----------------------------------------------------------------------------


def test_start_then_the_same_idempotency_key_finds_that_run(api: Any) -> None:
    client = api("add")
    body = {"workflow": "three-steps", "input": {"start": 4}, "idempotency_key": "order-7", "priority": 3}
    first = post(client, "/runs", body)
    assert first.status_code == 201 and first.json()["created"] is True
    run = first.json()["run"]
    assert run["workflow"] == "three-steps" and run["input"] == {"start": 4} and run["priority"] == 3
    assert run["status"] == "pending" and run["idempotency_key"] == "order-7"
    again = post(client, "/runs", body)
    assert again.status_code == 200 and again.json() == {"run": run, "created": False}
    assert WorkflowRun.objects.count() == 1


def test_start_later_by_a_delay_or_a_time(api: Any) -> None:
    client = api("add")
    delayed = post(client, "/runs", {"workflow": "three-steps", "available_at": "1h"}).json()["run"]
    timed = post(client, "/runs", {"workflow": "three-steps", "available_at": "2030-01-01T00:00:00Z"}).json()["run"]
    assert delayed["available_at"] > delayed["created_at"] and timed["available_at"].startswith("2030-01-01T00:00:00")


def test_list_filters_and_pages_by_its_next_link(api: Any) -> None:
    started = [three_steps.run({"customer": i % 2, "n": i}).id for i in range(5)]
    client = api("view")
    seen: list[str] = []
    url: str | None = f"{API}/runs?limit=2&input=" + '{"customer": 0}'
    while url:
        page = client.get(url).json()
        assert all("input" not in run for run in page["runs"])  # lists leave payloads out
        seen += [run["id"] for run in page["runs"]]
        url = page["next"]
    assert seen == [str(run_id) for run_id in reversed(started) if started.index(run_id) % 2 == 0]
    assert client.get(f"{API}/runs", {"status": "completed,failed"}).json()["runs"] == []
    assert len(client.get(f"{API}/runs", {"status": "pending", "workflow": "three-steps"}).json()["runs"]) == 5
    after = client.get(f"{API}/runs", {"created_after": "2000-01-01T00:00:00Z", "queue": "default"}).json()
    assert len(after["runs"]) == 5 and after["next_cursor"] is None


def test_get_a_run_and_its_steps(api: Any, run_worker: Any) -> None:
    handle = three_steps.run({"start": 2})
    run_worker(until=lambda: handle.status() == "completed")
    client = api("view")
    run = client.get(f"{API}/runs/{handle.id}").json()["run"]
    assert run["status"] == "completed" and run["output"] == {"result": 21} and run["input"] == {"start": 2}
    steps = client.get(f"{API}/runs/{handle.id}/steps").json()
    assert [(s["step"], s["status"], s["attempt"]) for s in steps["steps"]] == [
        ("one", "completed", 1),
        ("two", "completed", 1),
        ("three", "completed", 1),
    ]
    missing = client.get(f"{API}/runs/{uuid.uuid4()}/steps")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    assert client.get(f"{API}/runs/not-a-uuid").status_code == 404


def test_operations_answer_the_run_or_409_with_the_reason(api: Any) -> None:
    client = api("add", "change")
    handle = three_steps.run({"start": 1})
    canceled = post(client, f"/runs/{handle.id}/cancel")
    assert canceled.status_code == 200 and canceled.json()["run"]["status"] == "canceled"
    again = post(client, f"/runs/{handle.id}/cancel")
    assert again.status_code == 409 and "already finished (canceled)" in error_of(again)["message"]
    rerun = post(client, f"/runs/{handle.id}/rerun")
    assert rerun.status_code == 201 and rerun.json()["run"]["id"] != str(handle.id)
    failed = three_steps.run({"start": 1})
    WorkflowRun.objects.filter(id=failed.id).update(status="failed", error={"message": "boom"})
    retried = post(client, f"/runs/{failed.id}/retry")
    assert retried.status_code == 200 and retried.json()["run"]["status"] == "pending"
    later = three_steps.run({"start": 1}, available_at="1h")
    was = later.fetch().available_at
    due = post(client, f"/runs/{later.id}/retry-now")
    assert due.status_code == 200 and later.fetch().available_at < was


def test_signals_and_events(api: Any) -> None:
    client = api("add", "change")
    handle = three_steps.run({"start": 1})
    sent = post(
        client, f"/runs/{handle.id}/signals", {"name": "approve", "data": {"by": "ada"}, "idempotency_key": "k"}
    )
    assert sent.status_code == 200 and sent.json() == {
        "run_id": str(handle.id),
        "signal": "approve",
        "delivered": False,
    }
    assert Signal.objects.get(workflow_run_id=handle.id).data == {"by": "ada"}
    WorkflowRun.objects.filter(id=handle.id).update(status="completed")
    finished = post(client, f"/runs/{handle.id}/signals", {"name": "approve"})
    assert finished.status_code == 409 and error_of(finished)["code"] == "run_finished"
    first = post(client, "/events", {"event": "order.paid", "payload": {"order": 7}, "idempotency_key": "e-7"}).json()
    assert first["woke"] == 0 and first["started"] == [] and first["repeat"] is False
    assert post(client, "/events", {"event": "order.paid", "idempotency_key": "e-7"}).json()["repeat"] is True
    assert Event.objects.count() == 1


def test_the_workflow_index_counts_runs_by_status(api: Any) -> None:
    three_steps.run({"start": 1})
    three_steps.run({"start": 2})
    WorkflowRun.objects.create(workflow_name="gone", status="completed", input=None, available_at="2026-01-01T00:00Z")
    index = {entry["name"]: entry for entry in api("view").get(f"{API}/workflows").json()["workflows"]}
    assert index["three-steps"]["registered"] and index["three-steps"]["counts"]["pending"] == 2
    assert index["three-steps"]["total"] == 2 and index["three-steps"]["runs"].endswith("?workflow=three-steps")
    assert not index["gone"]["registered"] and index["gone"]["total"] == 1 and index["gone"]["versions"] == []


# -- bad input: a 4xx that names the problem, and nothing written ------------------------------

BAD_REQUESTS: list[tuple[str, str, Any, int, str, str]] = [
    # (method, path, body or query, status, code, words of the message)
    ("post", "/runs", "{not json", 400, "malformed_json", "not valid JSON"),
    ("post", "/runs", "[1, 2]", 400, "malformed_json", "must be a JSON object"),
    ("post", "/runs", {"input": {}}, 400, "missing_field", "'workflow' is required"),
    ("post", "/runs", {"workflow": "three-steps", "inptu": 1}, 400, "unknown_field", "unknown field 'inptu'"),
    ("post", "/runs", {"workflow": "no-such-workflow"}, 404, "unknown_workflow", "no-such-workflow"),
    ("post", "/runs", {"workflow": 42}, 400, "invalid", "workflow must be a string"),
    ("post", "/runs", {"workflow": "three-steps", "priority": "high"}, 400, "invalid", "priority must be a whole"),
    ("post", "/runs", {"workflow": "three-steps", "available_at": "soonish"}, 400, "invalid", "soonish"),
    ("post", "/runs", {"workflow": "three-steps", "idempotency_key": "a\x00b"}, 400, "bad_payload", "NUL"),
    (
        "post",
        "/runs",
        {"workflow": "three-steps", "input": "x" * 1_200_000},
        413,
        "too_large",
        "the most this API reads",
    ),
    ("post", "/runs", {"workflow": "three-steps", "input": "x" * 1_048_600}, 413, "too_large", "over the limit"),
    ("get", "/runs", {"status": "sleeping"}, 400, "invalid", "unknown status 'sleeping'"),
    ("get", "/runs", {"limit": "ten"}, 400, "invalid", "limit must be a whole number"),
    ("get", "/runs", {"limit": "0"}, 400, "invalid", "from 1 to 500"),
    ("get", "/runs", {"cursor": "zzz"}, 400, "bad_cursor", "not a cursor"),
    ("get", "/runs", {"input": "{oops"}, 400, "invalid", "input must be a JSON object"),
    ("get", "/runs", {"input": "[42]"}, 400, "invalid", "must be a JSON object, not list"),
    ("get", "/runs", {"created_after": "yesterday"}, 400, "invalid", "ISO 8601"),
    ("get", "/runs", {"stauts": "failed"}, 400, "unknown_parameter", "unknown parameter 'stauts'"),
    ("post", "/runs/{run}/signals", {"data": 1}, 400, "missing_field", "'name' is required"),
    ("post", "/runs/{run}/signals", {"name": ""}, 400, "invalid", "name must be 1 to 255 characters"),
    ("post", "/runs/00000000-0000-4000-8000-000000000000/signals", {"name": "go"}, 404, "not_found", "no workflow run"),
    ("post", "/events", {"event": "order.paid", "payload": float("inf")}, 400, "bad_payload", "NaN or Infinity"),
    ("post", "/events", {}, 400, "missing_field", "'event' is required"),
    ("get", "/nothing-here", None, 404, "no_such_endpoint", "no API endpoint"),
    # JSON null, or another JSON type, where a string is required: a 400 naming the field, never a 500.
    ("post", "/runs", {"workflow": None}, 400, "invalid", "workflow is required"),
    ("post", "/runs/{run}/signals", {"name": None}, 400, "invalid", "name is required"),
    ("post", "/events", {"event": None}, 400, "invalid", "event is required"),
    ("post", "/events", {"event": ["order.paid"]}, 400, "invalid", "event must be a string, not an array"),
    ("post", "/events", {"event": {"type": "x"}}, 400, "invalid", "event must be a string, not an object"),
    ("post", "/runs/{run}/signals", {"name": True}, 400, "invalid", "name must be a string, not a boolean"),
    ("post", "/runs", {"workflow": "three-steps", "version": 2}, 400, "invalid", "version must be a string"),
    ("post", "/runs", {"workflow": "x" * 256}, 400, "invalid", "1 to 255 characters"),
    ("post", "/events", {"event": "paid", "idempotency_key": 7}, 400, "invalid", "idempotency_key must be a"),
    ("post", "/runs", {"workflow": "three-steps", "queue": 5}, 400, "invalid", "queue must be a string"),
    ("post", "/runs", {"workflow": "three-steps", "queue": "fast\n"}, 400, "invalid", "queue must be 1 to 64"),
    ("post", "/runs", {"workflow": "three-steps", "priority": 1001}, 400, "invalid", "from -1000 to 1000"),
    ("post", "/runs", {"workflow": "three-steps", "priority": True}, 400, "invalid", "priority must be a whole"),
    ("post", "/runs", {"workflow": "three-steps", "available_at": 60}, 400, "invalid", "available_at must be"),
    ("post", "/runs", {"workflow": "three-steps", "deadline_at": []}, 400, "invalid", "deadline_at must be"),
    # What a JSON Schema cannot state has a code of its own.
    (
        "post",
        "/runs",
        {"workflow": "three-steps", "available_at": "1000-01-01T00:00:00+01:00"},  # 999 in UTC
        400,
        "out_of_range",
        "from the year 1000 to 9999",
    ),
    (
        "post",
        "/runs",
        {"workflow": "three-steps", "deadline_at": "2000-01-01T00:00:00Z"},
        400,
        "out_of_range",
        "already in the past",
    ),
    ("post", "/runs", {"workflow": "three-steps", "deadline_at": "5000y"}, 400, "out_of_range", "1000 years"),
    ("get", "/runs", {"created_after": "9999-12-31T23:59:59-01:00"}, 400, "out_of_range", "1000 to 9999"),
    ("get", "/runs", {"input": '{"a\\"b": 1}'}, 400, "bad_payload", "quotes or backslashes"),
    ("get", "/runs", {"limit": "\u00b2"}, 400, "invalid", "limit must be a whole number"),
    ("get", "/runs", {"limit": "501"}, 400, "invalid", "from 1 to 500"),
    ("get", "/runs", {"queue": "no spaces"}, 400, "invalid", "queue must be 1 to 64"),
    ("get", "/runs", {"workflow": ""}, 400, "invalid", "1 to 255 characters"),
    ("get", "/runs", {"status": "failed,,completed"}, 400, "invalid", "unknown status"),
]


@pytest.mark.parametrize(
    ("method", "path", "data", "status", "code", "words"),
    BAD_REQUESTS,
    ids=[f"{r[0]} {r[1]} {r[4]}" for r in BAD_REQUESTS],
)
def test_bad_input_is_a_4xx_naming_the_problem_and_writes_nothing(
    api: Any, method: str, path: str, data: Any, status: int, code: str, words: str
) -> None:
    client = api("view", "add", "change")
    run = three_steps.run({"start": 1})
    path = f"{API}{path.format(run=run.id)}"
    before = written()
    if method == "get":
        response = client.get(path, data)
    else:
        body = data if isinstance(data, str) else json.dumps(data)  # inf: Python writes Infinity, not JSON
        response = client.post(path, body, content_type=JSON)
    assert response.status_code == status, response.content[:300]
    error = error_of(response)
    assert error["code"] == code and words in error["message"], error
    assert written() == before


def test_a_body_that_is_not_json_is_415_and_a_wrong_method_405(api: Any) -> None:
    client = api("view", "add", "change")
    form = client.post(f"{API}/runs", {"workflow": "three-steps"})
    assert form.status_code == 415 and error_of(form)["code"] == "not_json"
    wrong = client.delete(f"{API}/runs")
    assert wrong.status_code == 405 and wrong["Allow"] == "GET, POST"
    assert client.get(f"{API}/events").status_code == 405
    assert WorkflowRun.objects.count() == 0


@pytest.mark.parametrize(
    ("path", "content_type", "body", "status", "code"),
    [
        ("/runs", "multipart/form-data", b"--x\r\n", 415, "not_json"),  # no boundary: Django's parser fails
        ("/runs/{run}/cancel", "multipart/form-data", b"--x\r\n", 415, "not_json"),  # reads no body: a form is refused
        ("/runs", "multipart/form-data; boundary=x", b"--x--\r\n", 415, "not_json"),
        ("/runs", "application/x-www-form-urlencoded", b"workflow=three-steps", 415, "not_json"),
        ("/events", "text/plain", b'{"event": "paid"}', 415, "not_json"),
        ("/runs", JSON, '{"workflow": "caf\u00e9"}'.encode("latin-1"), 400, "malformed_json"),  # not UTF-8
    ],
    ids=["multipart-without-boundary", "multipart-to-an-operation", "multipart", "form", "text", "latin-1"],
)
def test_a_body_of_any_content_type_gets_a_json_answer(
    django_user_model: Any, path: str, content_type: str, body: bytes, status: int, code: str | None
) -> None:
    # With the CSRF check on, as in production: Django's check reads a form body unless told not to.
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "add", "change"))
    token = "d" * 32
    client.cookies["csrftoken"] = token
    run = three_steps.run({"start": 1})
    before = written()
    response = client.generic(
        "POST", f"{API}{path.format(run=run.id)}", body, content_type=content_type, HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"] == JSON
    if code is not None:
        assert error_of(response)["code"] == code
        assert written() == before


@pytest.mark.parametrize("operation", ["cancel", "retry", "retry-now"])
def test_an_operation_reads_no_body_and_refuses_a_form_doing_nothing(api: Any, operation: str) -> None:
    client = api("change")
    run = three_steps.run({"start": 1})
    before = written()
    form = client.post(f"{API}/runs/{run.id}/{operation}", {"reason": "tidy-up"})  # multipart, as a browser form
    assert form.status_code == 415 and error_of(form)["code"] == "not_json"
    fields = post(client, f"/runs/{run.id}/{operation}", {"reason": "tidy-up"})
    assert fields.status_code == 400 and error_of(fields)["code"] == "unknown_field"
    assert written() == before and run.status() == "pending"


def test_an_operation_takes_a_bare_post_or_an_empty_json_object(api: Any) -> None:
    client = api("change")
    bare, empty = three_steps.run({"start": 1}), three_steps.run({"start": 2})
    assert client.generic("POST", f"{API}/runs/{bare.id}/cancel").status_code == 200
    assert post(client, f"/runs/{empty.id}/cancel", {}).status_code == 200
    assert bare.status() == empty.status() == "canceled"


def test_unsafe_requests_need_the_csrf_token(django_user_model: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user(django_user_model, "add"))
    refused = post(client, "/runs", {"workflow": "three-steps"})
    assert refused.status_code == 403 and error_of(refused)["code"] == "csrf_failed"
    assert WorkflowRun.objects.count() == 0
    token = "a" * 32  # the double-submit cookie: the header must repeat the cookie's token
    client.cookies["csrftoken"] = token
    accepted = post(client, "/runs", {"workflow": "three-steps"}, HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201
    assert client.get(f"{API}/runs").status_code == 403  # reading needs view, not add; GET needs no token


# -- the schema ----------------------------------------------------------------------------


def test_the_openapi_schema_describes_every_route(client: Client) -> None:
    schema = client.get(f"{API}/openapi.json").json()
    assert schema["openapi"].startswith("3.1") and schema["servers"] == [{"url": API}]
    routes = {
        "/" + re.sub(r"<str:(\w+)>", r"{\1}", str(pattern.pattern).removeprefix("api/"))
        for pattern in api_urls.urlpatterns
        if isinstance(pattern, URLPattern) and "<rest>" not in str(pattern.pattern)
    } - {"/openapi.json"}
    assert set(schema["paths"]) == routes
    run_fields = set(schema["components"]["schemas"]["Run"]["properties"])
    for method, path, _, _, _ in ENDPOINTS:
        operation = schema["paths"][path.replace("{run}", "{run_id}")][method]
        assert "401" in operation["responses"] and "403" in operation["responses"]
    run = three_steps.run({"start": 1})
    assert set(run_json(run.fetch(), payloads=True)) == run_fields


def test_the_openapi_schema_states_the_constraints_the_server_enforces(client: Client) -> None:
    schema = client.get(f"{API}/openapi.json").json()
    listing = {p["name"]: p for p in schema["paths"]["/runs"]["get"]["parameters"]}
    assert listing["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 500, "default": 50}
    assert listing["queue"]["schema"]["pattern"] == "^[A-Za-z0-9_.:-]{1,64}$"
    assert listing["workflow"]["schema"]["minLength"] == 1 and listing["workflow"]["schema"]["maxLength"] == 255
    start = schema["paths"]["/runs"]["post"]["requestBody"]["content"][JSON]["schema"]
    assert start["additionalProperties"] is False and start["required"] == ["workflow"]
    assert start["properties"]["workflow"]["type"] == "string" and start["properties"]["workflow"]["minLength"] == 1
    assert start["properties"]["priority"]["minimum"] == -1000 and start["properties"]["priority"]["maximum"] == 1000
    for path, field in (("/runs/{run_id}/signals", "name"), ("/events", "event")):
        body = schema["paths"][path]["post"]["requestBody"]["content"][JSON]["schema"]
        assert body["required"] == [field] and body["properties"][field]["type"] == "string"
    schemes = schema["components"]["securitySchemes"]
    assert schemes["session"] == {**schemes["session"], "type": "apiKey", "in": "cookie", "name": "sessionid"}
    assert schemes["csrf"]["in"] == "header" and schemes["csrf"]["name"].lower() == "x-csrftoken"
    assert schemes["token"] == {**schemes["token"], "type": "http", "scheme": "bearer"}
    assert schema["security"] == [{"session": []}, {"token": []}]  # either
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method == "post":
                assert operation["security"] == [{"session": [], "csrf": []}, {"token": []}], path
            for status, answer in operation["responses"].items():
                if status.startswith("4"):
                    assert answer["content"][JSON]["schema"] == {"$ref": "#/components/schemas/Error"}, (path, method)


# -- one session through a real HTTP server --------------------------------------------------


def test_through_a_real_server(live_server: Any, django_user_model: Any) -> None:
    user = make_user(django_user_model, "view", "add")
    client = Client()
    client.force_login(user)
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    session = client.cookies["sessionid"].value
    token = "b" * 32
    headers = {"Cookie": f"sessionid={session}; csrftoken={token}", "X-CSRFToken": token, "Content-Type": JSON}
    body = json.dumps({"workflow": "three-steps", "input": {"customer": 42}}).encode()
    request = urllib.request.Request(f"{live_server.url}{API}/runs", data=body, headers=headers, method="POST")
    with opener.open(request) as response:
        assert response.status == 201
        started = json.load(response)["run"]
    query = urllib.request.Request(f"{live_server.url}{API}/runs?input=%7B%22customer%22%3A42%7D", headers=headers)
    with opener.open(query) as response:
        assert [run["id"] for run in json.load(response)["runs"]] == [started["id"]]
    anonymous = urllib.request.Request(f"{live_server.url}{API}/runs")
    with pytest.raises(urllib.error.HTTPError) as refused:
        opener.open(anonymous)
    assert refused.value.code == 401 and json.load(refused.value)["error"]["code"] == "not_authenticated"
