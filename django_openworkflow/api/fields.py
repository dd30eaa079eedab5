"""Reading a request's fields: every value checked before use, and the JSON Schema that states the same rule.

Each rule here is written twice, once as Python that refuses a bad value
with an :class:`ApiError` naming the field, once as the JSON Schema
fragment ``schema.py`` publishes, side by side so that they cannot drift:
a schema-driven client never sends what the server refuses, and the server
never accepts what the schema forbids. The patterns use only what Python's
``re``, ECMA-262 and Rust's ``regex`` read alike (no ``\\s``, no ``\\d``:
Python's match non-ASCII spaces and digits), and the server matches them
with ``fullmatch`` (Python's ``$`` also matches before a final newline).

What a JSON Schema cannot state is checked on the server only, and refused
with a code of its own, so that a client can tell it apart:
``out_of_range`` (a time outside what the databases store, a day its
month lacks, a deadline already past, a duration over 1,000 years),
``bad_subject`` (a subject whose model is not installed, whose key is not
one of its primary keys, or, to start a run, that does not exist),
``bad_payload`` (a NUL character or a lone surrogate in text, JSON nested
too deep, an input search a database cannot compare) and ``bad_cursor``
(a string that no page gave as its ``next_cursor``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..client.listing import MAX_PAGE
from ..definitions.flow import PRIORITY_RANGE, QUEUE_CHARACTERS, QUEUE_NAME
from ..definitions.payload import check_text
from ..durations import parse_duration
from ..formatting import json_text
from ..store.queries import DISPLAY_STATUSES


class ApiError(Exception):
    """An answer other than success: its status, a code a program can test, a message a person can read."""

    def __init__(
        self, status: int, code: str, message: str, field: str | None = None, errors: dict[str, list[str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field
        self.errors = errors

    def response(self) -> HttpResponse:
        """The error as the API answers it: ``{"error": {"code", "message", "field"}}``, and a form's ``errors``."""
        error: dict[str, Any] = {"code": self.code, "message": self.message, "field": self.field}
        if self.errors is not None:
            error["errors"] = self.errors
        return json_response({"error": error}, self.status)


def json_response(data: Any, status: int = 200) -> HttpResponse:
    """``data`` as a JSON answer (datetimes as ISO 8601, non-ASCII readable, control characters escaped)."""
    return HttpResponse(json_text(data), status=status, content_type="application/json")


def _kind(value: Any) -> str:
    """A JSON value's type as JSON names it, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    kinds: dict[type, str] = {str: "a string", list: "an array", dict: "an object"}
    return kinds.get(type(value), type(value).__name__)


def invalid(field: str, message: str) -> ApiError:
    """A 400 naming ``field``."""
    return ApiError(400, "invalid", message, field)


# -- the rules and their schemas -------------------------------------------------------------

NAME_LENGTH = 255
NO_NUL = "^[^\\u0000]*$"
NAME_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": NAME_LENGTH, "pattern": NO_NUL}
"""Workflow names, versions, signal names, event types, idempotency keys: what their columns hold."""

QUEUE_SCHEMA: dict[str, Any] = {"type": "string", "pattern": f"^{QUEUE_CHARACTERS}$"}

PRIORITY_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": PRIORITY_RANGE[0], "maximum": PRIORITY_RANGE[1]}
LIMIT_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}
_DIGITS = re.compile("[0-9]{1,10}")
MAX_OFFSET = 2**53 - 1
"""The largest chunk offset a request may name (a stream's ``offset``, ``Last-Event-ID``): exact as a JSON number."""
OFFSET_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}
_OFFSET = re.compile("[0-9]{1,16}")

_ONE_STATUS = f"(?:{'|'.join(DISPLAY_STATUSES)})"
STATUS_PATTERN = f"^(?: *{_ONE_STATUS} *(?:, *{_ONE_STATUS} *)*)?$"
_STATUSES = re.compile(STATUS_PATTERN.strip("^$"))

_NUMBER = "(?:[0-9]+(?:\\.[0-9]+)?|\\.[0-9]+)"
_UNIT = (
    "(?:ms|msecs?|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?"
    "|d|days?|w|weeks?|mo|months?|y|yrs?|years?)"
)
DURATION_LENGTH = 64
DURATION_PATTERN = f"^ *(?:[0-9]+(?:\\.[0-9]+)? *|(?:{_NUMBER} *{_UNIT} *)+)$"
_DURATION = re.compile(DURATION_PATTERN.strip("^$"))

_DATE = "[1-9][0-9]{3}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
_CLOCK = "(?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:[.][0-9]{1,6})?)?"
_ZONE = "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
MOMENT_PATTERN = f"^{_DATE}(?:[T ]{_CLOCK}{_ZONE}?)?$"
MOMENT = re.compile(MOMENT_PATTERN.strip("^$"))
# Not "format": "date-time": RFC 3339 demands an offset and seconds, which a moment here may leave out.
MOMENT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": MOMENT_PATTERN,
    "description": "ISO 8601: a date (its midnight), or a date and time, with seconds and up to 6 decimals or "
    "without, with an offset (Z, +01:00) or without (UTC): 2026-11-25, 2026-11-25T09:30:00Z; the years 1000 to "
    "9999 in UTC (400 out_of_range for a day its month lacks, or an offset that takes it past those years)",
}
WHEN_SCHEMA: dict[str, Any] = {
    "anyOf": [
        MOMENT_SCHEMA,
        {
            "type": "string",
            "maxLength": DURATION_LENGTH,
            "pattern": DURATION_PATTERN,
            "description": "a duration from now of at most 1000 years: '10m', '1h30m', '2 days', or bare milliseconds",
        },
        {"type": "null"},
    ]
}


SUBJECT_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*[.][A-Za-z_][A-Za-z0-9_]*:[^\\u0000]{1,255}$"
SUBJECT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "maxLength": 512,
    "pattern": SUBJECT_PATTERN,
    "description": "an object of the project as app_label.model:pk, e.g. shop.order:42 (400 bad_subject when "
    "that model is not installed or the key is not one of its primary keys)",
}
_SUBJECT = re.compile(SUBJECT_PATTERN.strip("^$"))


def subject(value: Any, field: str = "subject") -> str | None:
    """An object as ``app_label.model:pk`` text (the shape only: the client checks the model and the key), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string, not {_kind(value)}")
    if len(value) > 512 or not _SUBJECT.fullmatch(value):
        raise invalid(field, f"{field} must be written app_label.model:pk, such as shop.order:42, got {value!r:.80}")
    return value


def name(data: Mapping[str, Any], field: str) -> str | None:
    """An optional name or key: a string of 1 to 255 characters a database stores; None when absent or null."""
    value = data.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string, not {_kind(value)}")
    if not 0 < len(value) <= NAME_LENGTH:
        raise invalid(field, f"{field} must be 1 to {NAME_LENGTH} characters long, not {len(value)}")
    check_text(value, field)  # PayloadError (400 bad_payload): a NUL or a lone surrogate
    return value


def required_name(data: Mapping[str, Any], field: str) -> str:
    """A required name: as :func:`name`, and JSON null is refused like any other non-string."""
    value = name(data, field)
    if value is None:
        raise invalid(field, f"{field} is required: a string of 1 to {NAME_LENGTH} characters, not null")
    return value


def queue(value: Any, field: str = "queue") -> str | None:
    """A queue name (letters, digits, ``_ . : -``, 1 to 64), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string, not {_kind(value)}")
    if not QUEUE_NAME.match(value):
        raise invalid(field, f"{field} must be 1 to 64 letters, digits, '_', '.', ':' or '-', got {value!r:.80}")
    return value


def priority(value: Any) -> int | None:
    """A priority from -1000 to 1000, or None; ``3.0`` is 3, as JSON Schema counts it an integer."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    low, high = PRIORITY_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid("priority", f"priority must be a whole number from {low} to {high}, got {value!r:.40}")
    return value


def limit(text: str) -> int:
    """A page size from 1 to 500, from a query string."""
    if not _DIGITS.fullmatch(text) or not 1 <= int(text) <= MAX_PAGE:
        raise invalid("limit", f"limit must be a whole number from 1 to {MAX_PAGE}, got {text!r:.40}")
    return int(text)


def offset(text: str, field: str) -> int:
    """A chunk offset from 0 to :data:`MAX_OFFSET`, from a query string or a header: decimal digits and nothing else."""
    if not _OFFSET.fullmatch(text) or int(text) > MAX_OFFSET:
        raise invalid(
            field, f"{field} must be a chunk's offset, a whole number from 0 to {MAX_OFFSET}, got {text!r:.40}"
        )
    return int(text)


def statuses(values: list[str]) -> list[str]:
    """The display statuses of ``status`` parameters, each one or several separated by commas."""
    found = []
    for value in values:
        if not _STATUSES.fullmatch(value):
            expected = ", ".join(DISPLAY_STATUSES)
            raise invalid("status", f"unknown status {value!r:.60}; expected one or more of {expected}, by commas")
        found += [part.strip(" ") for part in value.split(",") if part.strip(" ")]
    return found


def moment_text(value: Any, field: str) -> str:
    """``value`` if it is text of the shape ``MOMENT_PATTERN``, else a 400 naming ``field``.

    The shape before any parser: ``parse_datetime`` and ``fromisoformat`` read
    far more than the schema can state (week dates, digits without dashes, any
    separator, non-ASCII digits, surrounding spaces).
    """
    if not isinstance(value, str):
        raise invalid(field, f"{field} must be a string, not {_kind(value)}")
    if not MOMENT.fullmatch(value):
        example = "2026-11-25T09:30:00Z"
        raise invalid(field, f"{field} must be an ISO 8601 date and time such as {example}, got {value!r:.80}")
    return value


def moment(value: Any, field: str) -> datetime:
    """An aware datetime from ISO 8601 text of the shape ``MOMENT_PATTERN``, within the years every database stores."""
    value = moment_text(value, field)
    try:
        parsed = parse_datetime(value)
    except ValueError:
        parsed = None
    if parsed is None:  # the shape is right, so the day is past its month's end (2026-02-30)
        raise ApiError(400, "out_of_range", f"{field} names a day its month does not have: {value!r:.80}", field)
    try:
        utc = parsed.astimezone(UTC) if timezone.is_aware(parsed) else parsed.replace(tzinfo=UTC)
    except OverflowError:
        utc = None
    # MariaDB's DATETIME holds the years 1000 to 9999; PostgreSQL and SQLite hold more.
    if utc is None or not 1000 <= utc.year <= 9999:
        raise ApiError(
            400, "out_of_range", f"{field} must be from the year 1000 to 9999 in UTC, got {value!r:.80}", field
        )
    return utc


def when(data: Mapping[str, Any], field: str) -> datetime | str | None:
    """A start or deadline: an ISO 8601 datetime, or a duration from now (checked here, added to the DB clock later)."""
    value = data.get(field)
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= DURATION_LENGTH and _DURATION.fullmatch(value):
        try:
            parse_duration(value)
        except ValueError as exc:  # the pattern matched, so only its length can be wrong
            raise ApiError(400, "out_of_range", f"{field}: {exc}", field) from None
        return value
    try:
        return moment(value, field)
    except ApiError as exc:
        if exc.code == "out_of_range":
            raise
        raise invalid(
            field,
            f"{field} must be an ISO 8601 date and time or a duration such as '10m' or '1h30m', got {value!r:.80}",
        ) from None


def future(value: datetime | str | None, field: str) -> None:
    """Refuse a deadline already past (the database clock decides at the start; this answers the plain case)."""
    if isinstance(value, datetime) and value <= timezone.now():
        raise ApiError(400, "out_of_range", f"{field} {value.isoformat()} is already in the past", field)
