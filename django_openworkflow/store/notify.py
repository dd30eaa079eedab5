"""Wake-ups: what a backend's listener looks like, and the process-wide waiter for ``handle.result()``.

Only databases with notifications (PostgreSQL's LISTEN/NOTIFY) have a
listener; elsewhere workers and waiters poll. A lost notification delays
work, never loses it.
"""

from __future__ import annotations

import threading
from typing import Protocol

DUE_CHANNEL = "openworkflow_due"
"""A run became claimable (inserted, woken, retried)."""
DONE_CHANNEL = "openworkflow_done"
"""A run finished; the payload is its id."""


class Listener(Protocol):
    """A daemon thread that calls ``on_notify(channel, payload)`` for each notification."""

    connected: threading.Event
    """Set while listening; a (re)connection reports a wake-up on every channel."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


class _RunWaiters:
    """One process-wide listener on ``openworkflow_done`` for ``handle.result()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[threading.Event]] = {}
        self._listener: Listener | None = None

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            if payload:
                events = self._events.pop(payload, [])
            else:
                # No run named (SQLite's commits, a reconnection): every waiter looks
                # again and stays registered; it clears its event before it looks.
                events = [event for waiting in self._events.values() for event in waiting]
        for event in events:
            event.set()

    def register(self, run_id: str) -> threading.Event | None:
        """An event set when ``run_id`` finishes; None where the database cannot notify."""
        from . import get_backend

        with self._lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = get_backend().listener([DONE_CHANNEL], self._dispatch)
                if self._listener is None:
                    return None
                self._listener.start()
            listener = self._listener
            event = threading.Event()
            self._events.setdefault(run_id, []).append(event)
        # Listen before the caller reads the run's status, or a finish between
        # the read and the LISTEN would be missed until the next poll.
        listener.connected.wait(2.0)
        return event

    def close(self) -> None:
        """Stop the listener (it restarts on the next ``register``)."""
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
            listener.join(5)

    def unregister(self, run_id: str, event: threading.Event) -> None:
        with self._lock:
            events = self._events.get(run_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._events.pop(run_id, None)


run_waiters = _RunWaiters()
