"""What the OpenAPI document states is what the server takes: the gaps schemathesis found (issue 41).

A moment's shape (``created_after``, ``available_at``, a backfill's range),
NUL characters in free text, and the events' ``Last-Event-ID`` and
``offset``: each is refused by the server exactly when the document says
so, with a 400 naming the field, and nothing written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from django_openworkflow.models import Approval, Signal
from tests.api.test_views import API, JSON, error_of, make_user, written
from tests.conftest import is_parked
from tests.fixtures.progress_workflows import progress_steps
from tests.fixtures.testapp.workflows import refund

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def document(client: Client) -> dict[str, Any]:
    return client.get(f"{API}/openapi.json").json()


@pytest.fixture
def staff(django_user_model: Any) -> Client:
    client = Client()
    client.force_login(make_user(django_user_model, "view", "add", "change"))
    return client


def stated(schema: dict[str, Any], value: str) -> bool:
    """Whether ``value`` is a string ``schema`` allows (its pattern, as ECMA-262 reads it, and its lengths)."""
    pattern = schema.get("pattern")
    # The patterns are written for every engine alike: anchored, no \s or \d; "$" is the end (no final newline).
    if pattern is not None and not re.fullmatch(pattern.removeprefix("^").removesuffix("$"), value):
        return False
    return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value))


# -- a moment ---------------------------------------------------------------------------------

ACCEPTED_MOMENTS = [
    "2026-11-25",
    "2026-11-25T09:30",
    "2026-11-25 09:30:00",
    "2026-11-25T09:30:00Z",
    "2026-11-25T09:30:00.5+05:30",
    "2026-11-25T09:30:00.123456-00:00",
    "1000-01-01T00:00:00",
    "9999-12-31T23:59:59.999999Z",
]
REFUSED_MOMENTS = [
    "yesterday",
    "2026-W48-3",  # ISO 8601 week dates, which Python's fromisoformat reads
    "20261125T093000",  # the basic format, likewise
    "2026-11-25x09:30",  # any separator, likewise
    "2026-1-5T9:3",  # digits left out
    "\uff12\uff10\uff12\uff16-11-25",  # non-ASCII digits
    " 2026-11-25T09:30:00Z",  # spaces around
    "2026-11-25T09:30:00Z ",
    "2026-11-25T09",
    "2026-11-25T09:30:00+0100",
    "2026-11-25T09:30:00.1234567Z",
    "2026-11-25T09:30:00\x00",
    "0999-12-31T00:00:00Z",  # the years 1000 to 9999: a pattern states these
    "2026-13-01",
    "2026-11-25T24:00:00",
]


@pytest.mark.parametrize("value", ACCEPTED_MOMENTS + REFUSED_MOMENTS)
def test_a_moment_is_taken_exactly_when_the_document_allows_it(document, staff, value):
    accepted = value in ACCEPTED_MOMENTS
    [parameter] = [p for p in document["paths"]["/runs"]["get"]["parameters"] if p["name"] == "created_after"]
    assert stated(parameter["schema"], value) is accepted
    body = document["paths"]["/runs/actions/cancel"]["post"]["requestBody"]["content"][JSON]["schema"]
    [moment, null] = body["properties"]["created_before"]["anyOf"]
    assert stated(moment, value) is accepted and null == {"type": "null"}
    listed = staff.get(f"{API}/runs", {"created_after": value})
    previewed = staff.post(f"{API}/runs/actions/cancel", json.dumps({"created_before": value}), content_type=JSON)
    started = staff.post(
        f"{API}/runs", json.dumps({"workflow": "three-steps", "available_at": value}), content_type=JSON
    )
    if accepted:
        assert (listed.status_code, previewed.status_code, started.status_code) == (200, 200, 201)
    else:
        for response, field in ((listed, "created_after"), (previewed, "created_before"), (started, "available_at")):
            assert response.status_code == 400, response.content
            assert (error_of(response)["code"], error_of(response)["field"]) == ("invalid", field)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("2026-02-30", "a day its month does not have"),
        ("2026-04-31T00:00:00Z", "a day its month does not have"),
        ("1000-01-01T00:30:00+01:00", "from the year 1000 to 9999"),  # 999 in UTC
        ("9999-12-31T23:59:59-01:00", "from the year 1000 to 9999"),
    ],
)
def test_what_a_pattern_cannot_state_of_a_moment_is_out_of_range(document, staff, value, words):
    [parameter] = [p for p in document["paths"]["/runs"]["get"]["parameters"] if p["name"] == "created_after"]
    assert stated(parameter["schema"], value)
    error = error_of(staff.get(f"{API}/runs", {"created_after": value}))
    assert (error["code"], error["field"]) == ("out_of_range", "created_after") and words in error["message"]


# -- NUL characters, and every other string a request carries ----------------------------------


def request_strings(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every string schema of a parameter or a request body field: (where, its schema)."""

    def walk(where: str, schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
        kinds = schema.get("type")
        if kinds == "string" or (isinstance(kinds, list) and "string" in kinds):
            yield where, schema
        for key in ("anyOf", "oneOf", "allOf"):
            for i, alternative in enumerate(schema.get(key, [])):
                yield from walk(f"{where}/{key}{i}", alternative)
        for name, field in schema.get("properties", {}).items():
            yield from walk(f"{where}.{name}", field)
        for key in ("items", "additionalProperties"):
            if isinstance(schema.get(key), dict):
                yield from walk(f"{where}[{key}]", schema[key])

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                yield from walk(f"{method} {path} {parameter['name']}", parameter.get("schema", {}))
            body = operation.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema", {})
            yield from walk(f"{method} {path} body", body)


def test_no_string_a_request_carries_may_hold_a_nul_by_the_document(document):
    # PostgreSQL stores no NUL in text: the server refuses one in every field, and the document must say so.
    loose = [
        where
        for where, schema in request_strings(document)
        if "enum" not in schema and schema.get("format") != "uuid" and stated(schema, "a\x00b")
    ]
    assert loose == []


@pytest.mark.parametrize(
    ("method", "path", "data", "code", "field"),
    [
        ("post", "/runs", {"workflow": "three-steps", "idempotency_key": "a\x00b"}, "bad_payload", "idempotency_key"),
        ("post", "/runs", {"workflow": "three-steps", "queue": "a\x00b"}, "invalid", "queue"),
        ("post", "/runs", {"workflow": "three-steps", "subject": "auth.user:1\x00"}, "invalid", "subject"),
        ("post", "/runs", {"workflow": "three-steps", "available_at": "1h\x00"}, "invalid", "available_at"),
        ("post", "/runs/{run}/signals", {"name": "go\x00"}, "bad_payload", "name"),
        ("post", "/events", {"event": "paid\x00"}, "bad_payload", "event"),
        ("post", "/runs/actions/cancel", {"workflow": "three-\x00steps"}, "bad_payload", "workflow"),
        ("post", "/runs/actions/cancel", {"created_after": "2026-01-01\x00"}, "invalid", "created_after"),
        ("get", "/runs", {"cursor": "a\x00b"}, "bad_cursor", "cursor"),
        # An input search reaches PostgreSQL's jsonb, which reads no NUL: it was a 500 there.
        ("get", "/runs", {"input": '{"a\\u0000b": 1}'}, "bad_payload", "input"),
        ("get", "/runs", {"input": '{"a": ["b\\u0000"]}'}, "bad_payload", "input"),
        ("post", "/runs/actions/cancel", {"input": {"a": "b\x00"}}, "bad_payload", "input"),
        ("post", "/runs/actions/rerun", {"input": {"\ud800": True}}, "bad_payload", "input"),
        ("get", "/runs", {"created_before": "2026-01-01\x00"}, "invalid", "created_before"),
        ("get", "/runs/{run}/events", {"stream": "log\x00"}, "bad_payload", "stream"),
        ("post", "/approvals/1/decide", {"approved": True, "comment": "no\x00"}, "bad_payload", "comment"),
        ("post", "/approvals/1/reassign", {"to": "ada\x00"}, "bad_payload", "to"),
    ],
)
def test_a_nul_is_refused_naming_its_field_on_every_database(staff, method, path, data, code, field):
    run = progress_steps.run()
    before = written()
    url = f"{API}{path.format(run=run.id)}"
    response = staff.get(url, data) if method == "get" else staff.post(url, json.dumps(data), content_type=JSON)
    assert response.status_code == 400, response.content
    assert (error_of(response)["code"], error_of(response)["field"]) == (code, field)
    assert written() == before


@pytest.fixture
def opened(run_worker: Any, django_user_model: Any) -> tuple[Client, Approval]:
    """An approval waiting for the decision of the client's user."""
    handle = refund.run({"amount": 5, "assignees": ["user:ada"]})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    client = Client()
    client.force_login(django_user_model.objects.create_user("ada", password="pw"))
    return client, Approval.objects.get(workflow_run_id=handle.id)


def test_a_decisions_comment_is_refused_as_the_document_says_and_null_is_none(document, opened):
    client, approval = opened
    url = f"{API}/approvals/{approval.id}/decide"
    body = document["paths"]["/approvals/{approval_id}/decide"]["post"]["requestBody"]["content"][JSON]["schema"]
    comment = body["properties"]["comment"]
    assert not stated(comment, "no\x00") and not stated(comment, "x" * 2001) and stated(comment, "x" * 2000)
    for bad, code in (("no\x00", "bad_payload"), ("x" * 2001, "invalid"), (False, "invalid"), (0, "invalid")):
        refused = client.post(url, json.dumps({"approved": True, "comment": bad}), content_type=JSON)
        assert refused.status_code == 400, bad
        assert (error_of(refused)["code"], error_of(refused)["field"]) == (code, "comment")
    assert not Signal.objects.exists()
    assert comment["type"] == ["string", "null"]
    decided = client.post(url, json.dumps({"approved": True, "comment": None}), content_type=JSON)
    assert decided.status_code == 200 and decided.json()["decision"]["comment"] == ""


# -- the events' Last-Event-ID and offset ------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "offset"),
    [
        ("", None),  # an empty array, as a header: not "no header"
        ("1,2", None),  # an array of two
        (" 3", None),
        ("3 ", None),
        ("+3", None),
        ("9007199254740992", None),  # past 2**53 - 1
        ("9" * 5000, None),  # past what int() reads: never a 500
        (None, "9007199254740992"),
        (None, "9" * 5000),
        (None, ""),
    ],
)
def test_the_events_refuse_an_offset_the_document_does_not_allow(document, staff, header, offset):
    parameters = {p["name"]: p["schema"] for p in document["paths"]["/runs/{run_id}/events"]["get"]["parameters"]}
    assert (
        parameters["Last-Event-ID"] == parameters["offset"] == {"type": "integer", "minimum": 0, "maximum": 2**53 - 1}
    )
    run = progress_steps.run()
    headers = {} if header is None else {"Last-Event-ID": header}
    query = {} if offset is None else {"offset": offset}
    response = staff.get(f"{API}/runs/{run.id}/events", query, headers=headers)
    assert response.status_code == 400 and not response.streaming
    assert (error_of(response)["code"], error_of(response)["field"]) == (
        "invalid",
        "offset" if header is None else "Last-Event-ID",
    )


def test_an_unknown_parameter_of_the_events_is_named_as_everywhere(staff):
    run = progress_steps.run()
    error = error_of(staff.get(f"{API}/runs/{run.id}/events", {"strem": "log"}))
    assert (error["code"], error["field"]) == ("unknown_parameter", "strem")


# -- the Authorization header ------------------------------------------------------------------

AUTHORIZATIONS = [
    "Basic dXNlcjpwdw==",  # a proxy's credentials in front of the site: not the API's
    "^t3WG51m",  # no scheme at all
    "Token owf_0123456789_x",
    "Bearer",  # the API's scheme, malformed: always a 401
    "Bearer SCHEMATHESIS-INVALID-VALUE",
    "bearer owf_0123456789_" + "x" * 43,
]


@pytest.mark.parametrize("authorization", AUTHORIZATIONS)
@pytest.mark.parametrize("logged_in", [True, False], ids=["session", "no-session"])
def test_the_events_treat_an_authorization_header_as_every_endpoint_does(
    django_user_model, document, authorization, logged_in
):
    run = progress_steps.run()
    client = Client()
    if logged_in:
        client.force_login(make_user(django_user_model, "view"))
    headers = {"Authorization": authorization}
    answers = {
        path: client.get(f"{API}{path}", headers=headers)
        for path in ("/runs", f"/runs/{run.id}", "/workflows", f"/runs/{run.id}/events")
    }
    bearer = authorization.lower().startswith("bearer")
    expected = 401 if bearer or not logged_in else 200
    assert {path: answer.status_code for path, answer in answers.items()} == dict.fromkeys(answers, expected)
    if expected == 401:
        codes = {error_of(answer)["code"] for answer in answers.values()}
        assert len(codes) == 1 and answers[f"/runs/{run.id}/events"]["WWW-Authenticate"].startswith("Bearer")
    # What the server does, the document says: a header of another scheme is ignored, the session decides.
    assert "Basic" in document["components"]["securitySchemes"]["token"]["description"]
