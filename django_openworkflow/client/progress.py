"""Reading what a run publishes and streams: ``handle.get_event(key)`` and ``handle.stream(name)``.

Both poll the workflow database (a few milliseconds at first, backing off to
a quarter of a second): progress is committed a step boundary at a time,
and a read is one indexed query.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from ..errors import EventNotPublished, ProgressTimeout, RunNotFound
from ..states import FINISHED_STATUSES
from ..store import progress

MAX_PAUSE = 0.25
"""The longest pause between two reads while waiting, in seconds."""


def _seconds(timeout: float | timedelta | None) -> float | None:
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if timeout is not None and not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout >= 0):
        raise ValueError(f"timeout must be a finite number of seconds (at least 0) or None, got {timeout!r}")
    return timeout


def _status(run_id: uuid.UUID) -> str:
    status = progress.run_status(run_id)
    if status is None:
        raise RunNotFound(f"no workflow run with id {run_id}")
    return status


class _Waiter:
    """The pauses between reads, and the time left before ``timeout``."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self.give_up = None if timeout is None else time.monotonic() + timeout
        self.pause = 0.005

    def left(self) -> float | None:
        return None if self.give_up is None else self.give_up - time.monotonic()

    def wait(self) -> bool:
        """Sleep a little; False once the time is up (without sleeping)."""
        left = self.left()
        if left is not None and left <= 0:
            return False
        time.sleep(self.pause if left is None else min(self.pause, left))
        self.pause = min(self.pause * 2, MAX_PAUSE)
        return True

    def reset(self) -> None:
        """Something came: wait from now on, from the shortest pause."""
        self.give_up = None if self.timeout is None else time.monotonic() + self.timeout
        self.pause = 0.005


def get_event(run_id: uuid.UUID, key: str, timeout: float | timedelta | None = None) -> Any:
    """The latest value run ``run_id`` published under ``key``, waiting until it has one.

    Raises :class:`ProgressTimeout` after ``timeout`` seconds (``None``:
    wait as long as it takes, ``0``: one read), :class:`EventNotPublished`
    when the run finished without publishing ``key``, :class:`RunNotFound`
    for an unknown run.
    """
    waiter = _Waiter(_seconds(timeout))
    while True:
        found, value = progress.published_value(run_id, key)
        if found:
            return value
        status = _status(run_id)
        if status in FINISHED_STATUSES:
            found, value = progress.published_value(run_id, key)  # published by the run's last write
            if found:
                return value
            raise EventNotPublished(f"workflow run {run_id} ended ({status}) without publishing {key!r}")
        if not waiter.wait():
            raise ProgressTimeout(f"workflow run {run_id} did not publish {key!r} within {timeout}s (status {status})")


def read_stream(
    run_id: uuid.UUID,
    name: str,
    offset: int = 0,
    *,
    follow: bool = True,
    timeout: float | timedelta | None = None,
) -> Iterator[Any]:
    """The chunks of run ``run_id``'s stream ``name`` from ``offset`` on, in order; see ``RunHandle.stream``."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset must be an integer of at least 0, got {offset!r}")
    waiter = _Waiter(_seconds(timeout))
    _status(run_id)  # an unknown run fails at the first next(), not after a wait
    while True:
        chunks = progress.read_chunks(run_id, name, offset)
        for at, data in chunks:
            offset = at + 1
            yield data
        if len(chunks) == progress.MAX_CHUNKS_PER_READ:
            continue
        if not follow:
            return
        if chunks:
            waiter.reset()
            continue
        status = _status(run_id)
        if status in FINISHED_STATUSES:
            # Chunks ride on the run's writes, its last one included: one more read sees them all.
            for at, data in progress.read_chunks(run_id, name, offset, limit=2**31 - 1):
                offset = at + 1
                yield data
            return
        if not waiter.wait():
            raise ProgressTimeout(
                f"workflow run {run_id}'s stream {name!r} gave no chunk at offset {offset} "
                f"within {timeout}s (status {status})"
            )
