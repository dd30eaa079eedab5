"""Step code on threads of its own: parallel groups, and steps with a timeout.

A Python thread cannot be killed. A step whose code overruns its timeout is
*abandoned*: the engine stops waiting for it, records a ``StepTimeout`` and
gives the worker's slot back, while the thread runs on in the background
until the code returns; whatever it returns then is dropped. Each thread
closes its own database connections when its code ends.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("django_openworkflow.engine")

_abandoned = 0
_abandoned_lock = threading.Lock()


def abandoned_threads() -> int:
    """Threads of timed-out steps still running in this process."""
    return _abandoned


def count_abandoned(delta: int) -> None:
    global _abandoned
    with _abandoned_lock:
        _abandoned += delta


@dataclass
class Ended:
    """How one member's code ended: ``value`` or ``error``, or ``timed_out``."""

    index: int
    value: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    seconds: float = 0.0


class _Member:
    def __init__(self, index: int, fn: Callable[[], Any], timeout: float | None) -> None:
        self.index = index
        self.fn = fn
        self.timeout = timeout
        self.started = 0.0
        self.abandoned = False
        self.done = False
        self.lock = threading.Lock()


def run_on_threads(
    calls: list[tuple[Callable[[], Any], float | None]],
    max_workers: int,
    on_thread_exit: Callable[[], None],
    name: str = "owf-step",
) -> Iterator[list[Ended]]:
    """Run each ``(fn, timeout)`` on a daemon thread, at most ``max_workers`` at once.

    Yields the outcomes in the order they end, in batches of those that
    ended together, until every call has ended or timed out. A timeout
    counts from when that call's code starts. ``on_thread_exit`` runs on
    each thread after its code (it closes the thread's connections).
    """
    finished: queue.SimpleQueue[tuple[_Member, Any, BaseException | None]] = queue.SimpleQueue()
    waiting = deque(_Member(i, fn, timeout) for i, (fn, timeout) in enumerate(calls))
    running: dict[int, _Member] = {}

    def target(member: _Member, context: contextvars.Context) -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = context.run(member.fn)
        except BaseException as exc:  # user code: anything, SystemExit included
            error = exc
        finally:
            try:
                on_thread_exit()
            except Exception:  # pragma: no cover - closing a connection must not hide the result
                logger.debug("closing a step thread's connections failed", exc_info=True)
        with member.lock:
            if not member.abandoned:
                member.done = True
                finished.put((member, value, error))
                return
        count_abandoned(-1)
        logger.warning("a timed-out step's code returned %.1f s after it started", time.monotonic() - member.started)

    while waiting or running:
        while waiting and len(running) < max_workers:
            member = waiting.popleft()
            member.started = time.monotonic()
            running[member.index] = member
            # The workflow's context variables (logging, tracing) go with the code, a copy each.
            context = contextvars.copy_context()
            threading.Thread(target=target, args=(member, context), name=f"{name}-{member.index}", daemon=True).start()
        deadlines = [m.started + m.timeout for m in running.values() if m.timeout is not None]
        wait = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
        batch: list[Ended] = []
        try:
            ended, value, error = finished.get(timeout=wait)
            batch.append(_ended(ended, value, error))
            while True:  # everything else that ended meanwhile, in the same batch
                ended, value, error = finished.get_nowait()
                batch.append(_ended(ended, value, error))
        except queue.Empty:
            pass
        now = time.monotonic()
        for member in list(running.values()):
            if member.timeout is not None and now >= member.started + member.timeout:
                with member.lock:
                    # One that ended just now is in the queue: it is taken on the next turn.
                    member.abandoned = not member.done
                if member.abandoned:
                    count_abandoned(1)
                    batch.append(Ended(member.index, timed_out=True, seconds=now - member.started))
        for outcome in batch:
            running.pop(outcome.index, None)
        if batch:
            yield batch


def _ended(member: _Member, value: Any, error: BaseException | None) -> Ended:
    return Ended(member.index, value, error, seconds=time.monotonic() - member.started)
