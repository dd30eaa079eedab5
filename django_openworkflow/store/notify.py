"""PostgreSQL LISTEN on a dedicated autocommit connection, outside Django's.

Django's connections are per thread and in transactions at odd times; a
listener needs one long-lived autocommit connection that only waits. It is
built from the Django connection's parameters and reconnects with backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django.db import connections

from .db import alias

logger = logging.getLogger("django_openworkflow.notify")

DUE_CHANNEL = "openworkflow_due"
DONE_CHANNEL = "openworkflow_done"


def can_listen(using: str | None = None) -> bool:
    return connections[using or alias()].vendor == "postgresql"


class Listener(threading.Thread):
    """Calls ``on_notify(channel, payload)`` for each notification on ``channels``."""

    def __init__(
        self, channels: Iterable[str], on_notify: Callable[[str, str], None], using: str | None = None
    ) -> None:
        super().__init__(name="owf-listener", daemon=True)
        self.channels = list(channels)
        self.on_notify = on_notify
        self.using = using or alias()
        self.connected = threading.Event()
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        import psycopg

        params = connections[self.using].get_connection_params()
        params.pop("cursor_factory", None)
        params.pop("context", None)
        params.pop("prepare_threshold", None)
        params.pop("server_side_binding", None)
        backoff = 0.1
        while not self._stop_event.is_set():
            try:
                with psycopg.connect(**params, autocommit=True) as conn:
                    for channel in self.channels:
                        conn.execute(f'LISTEN "{channel}"')
                    self.connected.set()
                    # Whatever was sent while not listening is lost: report a
                    # wake-up so the owner looks for work now.
                    for channel in self.channels:
                        self.on_notify(channel, "")
                    backoff = 0.1
                    # Wake often enough to notice stop() promptly; a reconnect follows a drop.
                    while not self._stop_event.is_set():
                        for note in conn.notifies(timeout=0.25):
                            self.on_notify(note.channel, note.payload)
            except psycopg.Error as exc:
                self.connected.clear()
                logger.warning("LISTEN connection failed (%s); reconnecting in %.1fs", exc, backoff)
                self._stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)


class _RunWaiters:
    """One process-wide listener on ``openworkflow_done`` for ``handle.result()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[threading.Event]] = {}
        self._listener: Listener | None = None

    def _dispatch(self, channel: str, payload: str) -> None:
        with self._lock:
            events = self._events.pop(payload, [])
        for event in events:
            event.set()

    def register(self, run_id: str) -> threading.Event | None:
        """An event set when ``run_id`` finishes; None where LISTEN is unavailable."""
        if not can_listen():
            return None
        with self._lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = Listener([DONE_CHANNEL], self._dispatch)
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
