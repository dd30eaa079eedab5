"""The OpenAPI description of the workers' and queues' routes (``workers.py``): who serves each queue, pause, resume."""

from __future__ import annotations

from typing import Any

from .fields import QUEUE_SCHEMA
from .schema_blocks import TEXT, TIME, _answer, _errors, _object, _ref

WORKER_SCHEMAS = {
    "Worker": _object(
        {
            "worker_id": TEXT,
            "host": TEXT,
            "pid": {"type": "integer"},
            "version": {**TEXT, "description": "django-openworkflow's"},
            "queues": {"type": "array", "items": TEXT, "description": '"*": every queue not paused'},
            "slots_busy": {"type": "integer"},
            "slots_total": {"type": "integer"},
            "heartbeat_seconds": {"type": "number"},
            "started_at": TIME,
            "last_seen_at": TIME,
            "stopped_at": {**TIME, "description": "set when it stopped cleanly"},
            "state": {"enum": ["live", "dead", "stopped"], "description": "dead: not seen for 3 heartbeats"},
        }
    ),
    "Queue": _object(
        {
            "name": TEXT,
            "due": {"type": "integer", "description": "runs due now that no worker holds"},
            "running": {"type": "integer", "description": "runs a worker holds now"},
            "paused": {"type": "boolean"},
            "served_by": {"type": "array", "items": TEXT, "description": "the live workers that serve it"},
            "unserved": {"type": "boolean", "description": "runs are due, it is not paused, no live worker serves it"},
        }
    ),
}


def worker_paths() -> dict[str, Any]:
    """``/workers``, ``/queues`` and pausing and resuming a queue (``workers.py``)."""
    name = {"name": "name", "in": "path", "required": True, "schema": QUEUE_SCHEMA}
    paused = _object({"queue": _ref("Queue"), "changed": {"type": "boolean", "description": "false: it was so"}})

    def pause(verb: str, what: str) -> dict[str, Any]:
        return {
            "post": {
                "summary": f"{verb} a queue",
                "description": f"Needs the change permission. {what} from their next heartbeat (a third of their "
                "lease). A queue need not have runs.",
                "parameters": [name],
                "responses": {"200": _answer("the queue as it is now", paused), **_errors(400)},
            }
        }

    return {
        "/workers": {
            "get": {
                "summary": "The workers: live ones first, then those that stopped or died in the last day",
                "responses": {
                    "200": _answer(
                        "every worker row", _object({"workers": {"type": "array", "items": _ref("Worker")}})
                    ),
                    **_errors(400),
                },
            }
        },
        "/queues": {
            "get": {
                "summary": "The queues in use: due and running runs, paused or not, who serves them",
                "responses": {
                    "200": _answer("every queue", _object({"queues": {"type": "array", "items": _ref("Queue")}})),
                    **_errors(400),
                },
            }
        },
        "/queues/{name}/pause": pause("Pause", "Workers claim none of its runs"),
        "/queues/{name}/resume": pause("Resume", "Workers claim its runs again"),
    }
