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

Under WSGI the response is a plain iterator: each open connection holds a
worker thread while it lasts. Under ASGI it is an asynchronous one, which
reads the database in a thread (``sync_to_async``) and waits with
``asyncio.sleep``: a connection holds no worker between two reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
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
    """Where the stream starts: after ``Last-Event-ID`` (a reconnection), else at ``?offset=`` (default 0).

    A ``Last-Event-ID`` that is there must be an offset, an empty one too:
    a browser sends none before it has an id, and this stream's ids are
    never empty, so an empty one is a client's mistake, told rather than
    read as no header.
    """
    offset = fields.offset(request.GET.get("offset", "0"), "offset")
    last = request.headers.get("Last-Event-ID")
    if last is None:
        return offset
    return fields.offset(last, "Last-Event-ID") + 1


@endpoint(GET="view")
def run_events(request: HttpRequest, run_id: str) -> StreamingHttpResponse:
    """Server-sent events of a run's published values and of one of its streams (see the module)."""
    handle = _run_handle(run_id)
    handle.fetch()  # an unknown run is a 404 before the stream starts
    unknown = sorted(set(request.GET) - {"stream", "offset"})
    if unknown:
        message = f"unknown parameter {unknown[0]!r:.80}; expected stream, offset"
        raise ApiError(400, "unknown_parameter", message, unknown[0])
    stream = fields.name(request.GET, "stream")
    source = _Source(handle.id, stream, _start_offset(request))
    events = _async_events(source) if isinstance(request, ASGIRequest) else _events(source)
    response = StreamingHttpResponse(events, content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def _events(source: _Source) -> Iterator[str]:
    """The events for a WSGI server: the thread serving the request reads and waits."""
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    while True:
        lines, pause = source.poll()
        yield from lines
        if pause is None:
            return
        time.sleep(pause)


async def _async_events(source: _Source) -> AsyncIterator[str]:
    """The events for an ASGI server: reads in a thread, waits on the event loop."""
    yield f"retry: {RETRY_MILLISECONDS}\n\n"
    poll = sync_to_async(source.poll)
    while True:
        lines, pause = await poll()
        for line in lines:
            yield line
        if pause is None:
            return
        await asyncio.sleep(pause)


class _Source:
    """One connection's reads: what to send after each look at the database, and how long to wait then.

    Confined to the connection's response: each ``poll`` runs after the last
    one returned (on the serving thread, or in ``sync_to_async``'s thread).
    """

    def __init__(self, run_id: Any, stream: str | None, offset: int) -> None:
        self.run_id, self.stream, self.offset = run_id, stream, offset
        self.started = self.last_sent = time.monotonic()
        self.values: dict[str, Any] | None = None
        self.pause = 0.02

    def poll(self) -> tuple[list[str], float | None]:
        """The lines to send now, and the seconds to wait before the next poll (None: the response ends)."""
        lines: list[str] = []
        status = progress.run_status(self.run_id)
        finished = status is None or status in FINISHED_STATUSES
        # Read after the status: a finished run's last write carried its last values and chunks.
        current = progress.published_values(self.run_id)
        if current != self.values:
            self.values = current
            lines.append(_event("progress", current))
        while self.stream is not None:
            chunks = progress.read_chunks(self.run_id, self.stream, self.offset)
            for at, data in chunks:
                lines.append(_event("chunk", data, at))
                self.offset = at + 1
            if len(chunks) < progress.MAX_CHUNKS_PER_READ:
                break
        if finished:
            lines.append(_event("end", {"status": status or "deleted"}))
            return lines, None
        now = time.monotonic()
        if lines:
            self.last_sent, self.pause = now, 0.02
        elif now - self.last_sent >= HEARTBEAT_SECONDS:
            lines.append(": keep-alive\n\n")
            self.last_sent = now
        if now - self.started >= CONNECTION_SECONDS:
            return lines, None  # the client reconnects with Last-Event-ID
        pause, self.pause = self.pause, min(self.pause * 2, LONGEST_PAUSE)
        return lines, pause
