"""``POST runs/actions/{cancel,retry,retry-now,rerun}``: an operation on every run a filter matches.

The body holds the filter, in the vocabulary of ``GET runs`` (``status``,
``workflow``, ``queue``, ``created_after``, ``created_before``, ``input``),
and ``confirm_count``. Without ``confirm_count`` the answer is a preview
and nothing is done: how many runs match, how many the operation would
change, and how many it would leave alone, by reason. With it, the
operation is applied (``client/matching.py``: by chunks, each one
transaction), unless the filter now matches more runs than the count
confirmed (409 ``count_changed``: nothing done). Fewer is fine: runs that
left the filter meanwhile. Same permissions as the single-run operations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse

from ..client import matching
from ..client.listing import run_filter
from ..errors import InvalidArgument
from ..store import queries
from . import fields
from .fields import ApiError, json_response
from .views import _body, endpoint

ACTIONS: dict[str, tuple[str, str]] = {
    "cancel": ("cancel", "change"),
    "retry": ("retry_from_failed_step", "change"),
    "retry-now": ("retry_now", "change"),
    "rerun": ("rerun", "add"),
}
"""The path's name -> (the operation in ``client/matching.py``, the permission it needs)."""

FILTER_FIELDS = ("status", "workflow", "queue", "created_after", "created_before", "input", "subject")
BODY_FIELDS = {name: False for name in (*FILTER_FIELDS, "confirm_count")}
MAX_COUNT = 2**53 - 1
"""The largest ``confirm_count``: JSON numbers are exact up to here."""


def _statuses(value: Any) -> list[str]:
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(item, str) for item in values):
        raise fields.invalid("status", "status must be a string or an array of strings (display statuses)")
    return fields.statuses(values)


def _confirm_count(data: dict[str, Any]) -> int | None:
    value = data.get("confirm_count")
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise fields.invalid(
            "confirm_count", f"confirm_count must be a whole number from 0 to {MAX_COUNT}, got {value!r:.40}"
        )
    return value


def matching_runs(data: dict[str, Any]) -> Any:
    """The runs a body's filter matches (a queryset), every field checked; ApiError naming a bad one."""
    pattern = data.get("input")
    if pattern is not None and not isinstance(pattern, dict):
        raise fields.invalid("input", f"input must be a JSON object, not {fields._kind(pattern)}")
    moments = {
        name: fields.moment(data[name], name) if data.get(name) is not None else None
        for name in ("created_after", "created_before")
    }
    try:
        where = run_filter(
            status=_statuses(data.get("status")),
            workflow=fields.name(data, "workflow"),
            queue=fields.queue(data.get("queue")),
            input_contains=pattern,
            subject=fields.subject(data.get("subject")),
            created_after=moments["created_after"],
            created_before=moments["created_before"],
        )
    except InvalidArgument as exc:
        if exc.argument == "input_contains":  # an object no database can compare (see containment.py)
            raise ApiError(400, "bad_payload", str(exc), "input") from None
        if exc.argument == "subject":  # no installed model, or no primary key of it
            raise ApiError(400, "bad_subject", str(exc), "subject") from None
        raise
    return where.apply(queries.runs())


def _reasons(refused: dict[str, int]) -> list[dict[str, Any]]:
    return [{"reason": reason, "count": count} for reason, count in Counter(refused).most_common()]


def _action(name: str) -> Callable[..., HttpResponse]:
    operation, permission = ACTIONS[name]

    @endpoint(POST=permission)
    def view(request: HttpRequest) -> HttpResponse:
        data = _body(request, BODY_FIELDS)
        confirm_count = _confirm_count(data)
        runs = matching_runs(data)
        if confirm_count is None:
            seen = matching.preview(operation, runs)
            answer = {
                "done": False,
                "count": seen.count,
                "changed": seen.would_change,
                "refused": sum(seen.refused.values()),
                "reasons": _reasons(seen.refused),
                "created": [],
            }
        else:
            try:
                result = matching.apply_to_matching(operation, runs, confirm_count=confirm_count)
            except matching.MatchCountChanged as exc:
                raise ApiError(409, "count_changed", str(exc), "confirm_count") from None
            answer = {
                "done": True,
                "count": result.matched,
                "changed": result.changed,
                "refused": sum(result.refused.values()),
                "reasons": _reasons(result.refused),
                "created": [str(run_id) for run_id in result.created],
            }
        return json_response({"action": name, **answer})

    view.__name__ = view.__qualname__ = f"runs_{name.replace('-', '_')}"
    view.__doc__ = f"POST: {name} every run the body's filter matches (a preview without confirm_count)."
    return view


VIEWS = {name: _action(name) for name in ACTIONS}
