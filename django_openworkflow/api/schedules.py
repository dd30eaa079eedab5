"""The API's cron schedules: list them, start a run now, backfill past ticks.

``GET schedules`` needs the view permission on workflow runs;
``POST schedules/<name>/trigger`` and ``.../backfill`` the add permission,
as they start runs (the admin's button and form, and ``workflows schedule
trigger|backfill``, do the same). What they do is ``client/schedules.py``'s.
Authentication, CSRF and errors are ``views.endpoint``'s.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from ..client.schedules import backfill_schedule, declared_schedules, schedule_states, trigger_schedule
from . import fields
from .fields import ApiError, json_response
from .views import _body, _run, endpoint


def _time(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _declared(name: str) -> str:
    if name not in declared_schedules():
        raise ApiError(404, "not_found", f"no workflow named {name!r:.80} declares a schedule")
    return name


@endpoint(GET="view")
def schedule_list(request: HttpRequest) -> HttpResponse:
    """Every schedule declared in code, with its row's state (a schedule no worker has seen yet has none)."""
    if request.GET:
        name = next(iter(request.GET))
        raise ApiError(400, "unknown_parameter", f"unknown parameter {name!r:.80}; this takes none", name)
    return json_response({"schedules": schedule_states()})


@endpoint(POST="add")
def schedule_trigger(request: HttpRequest, name: str) -> HttpResponse:
    """POST: start a run of the schedule now, outside its cadence (no body)."""
    handle = trigger_schedule(_declared(name))
    return _run(handle.id, 201)


@endpoint(POST="add")
def schedule_backfill(request: HttpRequest, name: str) -> HttpResponse:
    """POST ``{"start": ..., "end": ...}``: start the runs of the past ticks in [start, end) that have none."""
    data = _body(request, {"start": True, "end": True})
    for field in ("start", "end"):  # read in the schedule's time zone (backfill_schedule), not as UTC moments
        fields.moment_text(data[field], field)
    done = backfill_schedule(_declared(name), data["start"], data["end"])
    return json_response(done.as_dict(), 201 if done.created else 200)
