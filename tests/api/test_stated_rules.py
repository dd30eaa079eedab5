"""What the OpenAPI document states is what the server takes: the gaps schemathesis found (issue 41).

A moment's shape (``created_after``, ``available_at``, a backfill's range),
NUL characters in free text, and the events' ``Last-Event-ID`` and
``offset``: each is refused by the server exactly when the document says
so, with a 400 naming the field, and nothing written.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client

from tests.api.test_views import API, JSON, error_of, make_user

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
