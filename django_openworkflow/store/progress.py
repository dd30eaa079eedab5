"""What runs publish and stream: written behind the fence with the journal, read by handles, the SSE view, the admin.

The engine buffers ``ctx.publish`` and ``ctx.stream(name).write`` as
:class:`~.records.ProgressWrite` items among its pending changes; the fenced
transaction of the next journal write hands them to :func:`write_progress`,
so a worker that lost its lease writes none. Each item carries its position
in the run's deterministic execution, so the replay of a slice that wrote
them writes nothing new: a chunk's (run, stream, offset) is unique and a
second insert is ignored; a value is replaced only by one of a later
position.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Max

from ..models import PublishedValue, StreamChunk, WorkflowRun
from .records import ProgressWrite

MAX_CHUNKS_PER_READ = 500
"""The most chunks one read returns; a reader asks again from the next offset."""


def write_progress(run_id: Any, items: Iterable[ProgressWrite], now: datetime) -> None:
    """Inside the fenced transaction: insert new chunks, set values of a later position than the stored ones."""
    chunks: list[StreamChunk] = []
    values: dict[str, ProgressWrite] = {}
    for item in items:
        if item.stream is not None:
            chunks.append(
                StreamChunk(
                    workflow_run_id=run_id, stream=item.stream, offset=item.position, data=item.value, created_at=now
                )
            )
        elif item.name not in values or values[item.name].position < item.position:
            values[item.name] = item
    if chunks:
        # Those a replay writes again are there already: the unique (run, stream, offset) drops them.
        StreamChunk.objects.bulk_create(chunks, ignore_conflicts=True)
    if not values:
        return
    # The fence holds the run's row: no other writer touches this run's values meanwhile.
    stored = dict(
        PublishedValue.objects.filter(workflow_run_id=run_id, key__in=list(values)).values_list("key", "position")
    )
    for key, item in values.items():
        if key not in stored:
            continue
        if stored[key] < item.position:
            PublishedValue.objects.filter(workflow_run_id=run_id, key=key).update(
                value=item.value, position=item.position, updated_at=now
            )
    new = [
        PublishedValue(workflow_run_id=run_id, key=key, value=item.value, position=item.position, updated_at=now)
        for key, item in values.items()
        if key not in stored
    ]
    if new:
        PublishedValue.objects.bulk_create(new)


def published_values(run_id: Any, limit: int | None = None) -> dict[str, Any]:
    """Every key the run published (the first ``limit`` by name, if given), with its latest value."""
    rows = PublishedValue.objects.filter(workflow_run_id=run_id).order_by("key").values_list("key", "value")
    return dict(rows[:limit] if limit is not None else rows)


def progress_counts(run_id: Any) -> tuple[int, int]:
    """How many keys the run published, and how many streams it wrote to."""
    keys = PublishedValue.objects.filter(workflow_run_id=run_id).count()
    streams = StreamChunk.objects.filter(workflow_run_id=run_id).values("stream").distinct().count()
    return keys, streams


def published_value(run_id: Any, key: str) -> tuple[bool, Any]:
    """``(True, value)`` if the run published ``key``, else ``(False, None)``."""
    rows = list(PublishedValue.objects.filter(workflow_run_id=run_id, key=key).values_list("value", flat=True)[:1])
    return (True, rows[0]) if rows else (False, None)


def read_chunks(run_id: Any, stream: str, offset: int, limit: int = MAX_CHUNKS_PER_READ) -> list[tuple[int, Any]]:
    """Up to ``limit`` chunks of ``stream`` from ``offset`` on, as ``(offset, data)`` in order, without a gap.

    Chunks are committed in order, a whole step boundary at a time, so the
    offsets present are always 0 … n-1; the check for a gap is a guard.
    """
    rows = list(
        StreamChunk.objects.filter(workflow_run_id=run_id, stream=stream, offset__gte=offset)
        .order_by("offset")
        .values_list("offset", "data")[:limit]
    )
    expected = offset
    for index, (at, _) in enumerate(rows):
        if at != expected:
            return rows[:index]
        expected += 1
    return rows


@dataclass(frozen=True)
class StreamSummary:
    """One stream of a run: its name, how many chunks it holds, and its last few."""

    name: str
    count: int
    last: list[tuple[int, Any]]


def stream_summaries(run_id: Any, last: int = 5, limit: int | None = None) -> list[StreamSummary]:
    """The run's streams by name (the first ``limit``, if given), each with its count and its ``last`` chunks.

    For the admin's run page: a query per stream shown, so the page caps them.
    """
    summaries = []
    streams = (
        StreamChunk.objects.filter(workflow_run_id=run_id)
        .values("stream")
        .annotate(count=Count("id"), top=Max("offset"))
        .order_by("stream")
    )
    for row in streams[:limit] if limit is not None else streams:
        tail = list(
            StreamChunk.objects.filter(workflow_run_id=run_id, stream=row["stream"], offset__gt=row["top"] - last)
            .order_by("offset")
            .values_list("offset", "data")
        )
        summaries.append(StreamSummary(row["stream"], row["count"], tail))
    return summaries


def run_status(run_id: Any) -> str | None:
    """The run's stored status, or None when there is no such run."""
    status = WorkflowRun.objects.filter(id=run_id).values_list("status", flat=True).first()
    return None if status is None else str(status)
