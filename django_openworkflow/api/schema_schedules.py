"""The OpenAPI description of the schedules' routes (``schedules.py``): listing, trigger now, backfill."""

from __future__ import annotations

from typing import Any

from ..client.schedules import BACKFILL_LIMIT
from ..definitions.cron import OVERLAPS
from .fields import MOMENT_PATTERN, NAME_SCHEMA
from .schema_blocks import RUN_ANSWER, TEXT, TIME, _answer, _body, _errors, _nullable, _object, _ref

SCHEDULE_SCHEMAS = {
    "Schedule": _object(
        {
            "name": {**TEXT, "description": "the workflow's name"},
            "cron": TEXT,
            "timezone": _nullable(TEXT, "an IANA name; null: settings.TIME_ZONE, until a worker writes the row"),
            "overlap": {"enum": list(OVERLAPS), "description": "what a tick does while a run is unfinished"},
            "missed": {"enum": ["latest", "skip"]},
            "paused": {"type": "boolean"},
            "last_tick_at": {**TIME, "description": "null until a worker has seen the schedule"},
            "next_tick_at": {**TIME, "description": "null until a worker has seen the schedule"},
            "buffered_tick_at": {
                **TIME,
                "description": "buffer_one: the tick whose run starts when the unfinished one ends",
            },
        }
    ),
    "Backfill": _object(
        {
            "workflow": TEXT,
            "ticks": {"type": "integer", "description": "the ticks in [start, end), up to now"},
            "created": {"type": "integer", "description": "the runs started; the other ticks had one already"},
            "first_tick": TIME,
            "last_tick": TIME,
            "runs": {"type": "array", "items": {"type": "string", "format": "uuid"}, "description": "one per tick"},
        }
    ),
}


def schedule_paths() -> dict[str, Any]:
    """``/schedules``, ``/schedules/{name}/trigger`` and ``/schedules/{name}/backfill``."""
    name = {"name": "name", "in": "path", "required": True, "schema": NAME_SCHEMA, "description": "the workflow's name"}
    moment = {
        "type": "string",
        "pattern": MOMENT_PATTERN,
        "description": "ISO 8601, as created_after takes it, but without an offset in the schedule's time zone; "
        "from the year 1900 to 9998 (400 invalid otherwise, and for an empty range or one of too many ticks)",
    }
    return {
        "/schedules": {
            "get": {
                "summary": "The cron schedules declared in code, paused or not",
                "responses": {
                    "200": _answer(
                        "every schedule", _object({"schedules": {"type": "array", "items": _ref("Schedule")}})
                    ),
                    **_errors(400),
                },
            }
        },
        "/schedules/{name}/trigger": {
            "post": {
                "summary": "Start a run of the schedule now, outside its cadence",
                "description": "Needs the add permission on workflow runs. No body. The run has the schedule's "
                "input and the key schedule:now:<time>/<nonce>, never a tick's; the overlap policy does not apply.",
                "parameters": [name],
                "responses": {"201": _answer("the new run", RUN_ANSWER), **_errors(404)},
            }
        },
        "/schedules/{name}/backfill": {
            "post": {
                "summary": "Start the runs of the schedule's past ticks in [start, end) that have none",
                "description": "Needs the add permission on workflow runs. Each run has its tick's key, as if the "
                "tick had fired: a tick that has a run gets none, so a repeated backfill starts nothing. Ticks "
                f"after now are left to the schedule; more than {BACKFILL_LIMIT} ticks is refused (400). "
                "201 when it started runs, 200 when every tick had one.",
                "parameters": [name],
                "requestBody": _body(["start", "end"], {"start": moment, "end": moment}),
                "responses": {
                    "200": _answer("every tick had a run", _ref("Backfill")),
                    "201": _answer("runs started", _ref("Backfill")),
                    **_errors(400, 404, 413, 415),
                },
            }
        },
    }
