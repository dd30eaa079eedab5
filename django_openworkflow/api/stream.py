"""A run's progress as server-sent events: ``GET api/runs/<id>/events?stream=<name>``.

For a browser's ``EventSource`` (or any SSE client), with the API's
authentication and the ``view`` permission on workflow runs (``views.py``):

- ``event: progress``: every value the run published (``ctx.publish``), as
  one JSON object, first at once and then whenever one changes;
- ``event: chunk``, ``id: <offset>``: each chunk of the stream named by
  ``stream`` (``ctx.stream(name).write``), in order, its data as JSON;
- ``event: end``: ``{"status": ...}`` once the run has finished and every
  chunk was sent; the response ends. Close the ``EventSource`` then, or it
  connects again (and is told ``end`` again).

A connection lasts at most :data:`CONNECTION_SECONDS`, so that a WSGI
worker is not held by one browser forever; the client reconnects by itself
(after ``retry:``, :data:`RETRY_MILLISECONDS`) sending ``Last-Event-ID``,
the offset of the last chunk it had, and the stream goes on from the next
one: each chunk is delivered once. ``?offset=`` starts a first connection
elsewhere than at 0. A comment line every :data:`HEARTBEAT_SECONDS` keeps
proxies from closing a quiet connection.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, StreamingHttpResponse

from ..states import FINISHED_STATUSES
from ..store import progress
from . import fields
from .fields import ApiError
from .views import _run_handle, endpoint

HEARTBEAT_SECONDS = 15.0
"""Seconds between comment lines on a quiet connection."""
CONNECTION_SECONDS = 60.0
"""The longest one response lasts; the client reconnects with ``Last-Event-ID``."""
RETRY_MILLISECONDS = 1000
"""How long the client waits before it reconnects (the ``retry:`` field)."""
LONGEST_PAUSE = 0.5
"""The longest pause between two reads of the database, in seconds."""


def _event(name: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {name}\ndata: {json.dumps(data, cls=DjangoJSONEncoder, separators=(',', ':'))}\n\n"


def _start_offset(request: HttpRequest) -> int:
    """Where the stream starts: after ``Last-Event-ID`` (a reconnection), else at ``?offset=`` (default 0)."""
    offset = request.GET.get("offset", "0")
    if not (offset.isascii() and offset.isdigit()):
        raise ApiError(400, "invalid", f"offset must be an integer of at least 0, got {offset!r:.40}", "offset")
    last = request.headers.get("Last-Event-ID", "").strip()
    if not last:
        return int(offset)
    if not (last.isascii() and last.isdigit()):
        raise ApiError(400, "invalid", f"Last-Event-ID must be a chunk's offset, got {last!r:.40}", "Last-Event-ID")
    return int(last) + 1


@endpoint(GET="view")
def run_events(request: HttpRequest, run_id: str) -> StreamingHttpResponse:
    """Server-sent events of a run's published values and of one of its streams (see the module)."""
    handle = _run_handle(run_id)
    handle.fetch()  # an unknown run is a 404 before the stream starts
    stream = fields.name(request.GET, "stream")
    response = StreamingHttpResponse(
        _events(handle.id, stream, _start_offset(request)), content_type="text/event-stream"
    )
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def _events(run_id: Any, stream: str | None, offset: int) -> Iterator[str]:
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    started = last_sent = time.monotonic()
    values: dict[str, Any] | None = None
    pause = 0.02
    while True:
        status = progress.run_status(run_id)
        finished = status is None or status in FINISHED_STATUSES
        # Read after the status: a finished run's last write carried its last values and chunks.
        current = progress.published_values(run_id)
        sent = False
        if current != values:
            values = current
            yield _event("progress", values)
            sent = True
        while stream is not None:
            chunks = progress.read_chunks(run_id, stream, offset)
            for at, data in chunks:
                yield _event("chunk", data, at)
                offset = at + 1
            sent = sent or bool(chunks)
            if len(chunks) < progress.MAX_CHUNKS_PER_READ:
                break
        if finished:
            yield _event("end", {"status": status or "deleted"})
            return
        now = time.monotonic()
        if sent:
            last_sent, pause = now, 0.02
        elif now - last_sent >= HEARTBEAT_SECONDS:
            yield ": keep-alive\n\n"
            last_sent = now
        if now - started >= CONNECTION_SECONDS:
            return  # the client reconnects with Last-Event-ID
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)
