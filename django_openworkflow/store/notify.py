"""Wake-ups: what a backend's listener looks like, and the process-wide waiter for ``handle.result()``.

Only databases with notifications (PostgreSQL's LISTEN/NOTIFY) have a
listener; elsewhere workers and waiters poll. A lost notification delays
work, never loses it.

The waiter's listener holds a connection of its own to the workflow
database. It is started by the first ``result()`` that has to wait, and
stopped when that connection would be in the way: when Django is about to
create or drop a database (a test run's setup and teardown, under Django's
runner, pytest-django or any runner that uses ``destroy_test_db``), and when
``DATABASES`` or ``OPENWORKFLOW`` change. The next ``result()`` that waits
starts it again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

logger = logging.getLogger("django_openworkflow.notify")

DUE_CHANNEL = "openworkflow_due"
"""A run became claimable (inserted, woken, retried)."""
DONE_CHANNEL = "openworkflow_done"
"""A run finished; the payload is its id."""


RECONNECT_BACKOFF = (0.1, 5.0)
"""Seconds a listener waits before it connects again: first, and at most (doubling in between)."""


def wait_to_reconnect(
    exc: Exception,
    *,
    backoff: float,
    connected: threading.Event,
    connected_at: float,
    stop: threading.Event,
    expected: type[Exception],
    what: str,
    logger: logging.Logger,
) -> float:
    """A listener's connection failed with ``exc``: log it, wait, and return the next wait.

    Shared by every listener thread, called on that thread. A database error
    (``expected``) is a warning; anything else (a bug, a failing
    ``on_notify``) is logged with its traceback. After five seconds
    connected, a failure counts as a fresh one, not one of a string.
    """
    first, most = RECONNECT_BACKOFF
    if connected.is_set() and time.monotonic() - connected_at > 5.0:
        backoff = first
    connected.clear()
    if isinstance(exc, expected):
        logger.warning("%s connection failed (%s); reconnecting in %.1fs", what, exc, backoff)
    else:
        logger.exception("%s thread failed; reconnecting in %.1fs", what, backoff)
    stop.wait(backoff)
    return min(backoff * 2, most)


class Listener(Protocol):
    """A daemon thread that calls ``on_notify(channel, payload)`` for each notification.

    It never ends by itself: a lost connection or a failing ``on_notify`` is
    logged, and it connects again after a backoff, until :meth:`stop`.
    ``on_notify`` is called on the listener's thread.
    """

    connected: threading.Event
    """Set while listening; a (re)connection reports a wake-up on every channel."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


class _RunWaiters:
    """One process-wide listener on ``openworkflow_done`` for ``handle.result()``.

    ``_events``, ``_asked`` and ``_listener`` are shared by every thread that
    waits for a result and by the listener's thread (through :meth:`_dispatch`);
    they are read and written only under ``_lock``. The events themselves are
    ``threading.Event``, safe to set and wait on from any thread.

    Where the database notifies only on request (PostgreSQL, migration 0009),
    each run waited for is asked for once (``_asked``: the run ids asked for)
    and the request is withdrawn when nobody in the process waits for it any
    more.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[threading.Event]] = {}
        self._listener: Listener | None = None
        self._asked: set[str] = set()

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

    def register(self, run_id: str, connect_timeout: float = 2.0) -> threading.Event | None:
        """An event set when ``run_id`` finishes; None where the database cannot notify.

        Starts the listener if it is not running, and waits up to
        ``connect_timeout`` seconds for it to listen.
        """
        from django.db import DatabaseError

        from . import get_backend

        with self._lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = get_backend().listener([DONE_CHANNEL], self._dispatch)
                if self._listener is None:
                    return None
                _connect_stop_hooks()
                self._listener.start()
            listener = self._listener
            event = threading.Event()
            self._events.setdefault(run_id, []).append(event)
        # Listen (and ask) before the caller reads the run's status, or a finish
        # between the read and the LISTEN would be missed until the next poll.
        listener.connected.wait(connect_timeout)
        with self._lock:
            ask = run_id not in self._asked
            if ask:
                self._asked.add(run_id)
        if ask:
            try:
                asked = get_backend().want_wakeups(listener, DONE_CHANNEL, run_id, True)
            except DatabaseError:
                logger.warning("could not ask to be told when run %s finishes; polling", run_id, exc_info=True)
                asked = None
            if asked is None:  # nobody would tell this waiter: it polls
                with self._lock:
                    self._asked.discard(run_id)
                self.unregister(run_id, event)
                return None
        return event

    def is_registered(self, run_id: str, event: threading.Event) -> bool:
        """Whether ``event`` will still be set by the listener (False once it was set for the run, or stopped)."""
        with self._lock:
            return event in self._events.get(run_id, [])

    @property
    def listening(self) -> bool:
        """Whether the listener thread is running."""
        with self._lock:
            return self._listener is not None and self._listener.is_alive()

    def close(self, wait: bool = True) -> None:
        """Stop the listener and close its connection; it starts again on the next ``register``.

        Waiters registered now are woken and forgotten: they look once more and
        poll from then on. With ``wait``, returns once the connection is closed
        (the PostgreSQL listener notices within a quarter of a second).
        """
        with self._lock:
            listener, self._listener = self._listener, None
            events = [event for waiting in self._events.values() for event in waiting]
            self._events.clear()
            self._asked.clear()  # the listener's connection ends: its requests go with it
        for event in events:
            event.set()
        if listener is not None:
            listener.stop()
            if wait and listener is not threading.current_thread():  # on its own thread: it ends by itself
                listener.join(5)

    def unregister(self, run_id: str, event: threading.Event) -> None:
        """Forget ``event`` (the waiter has its result, or gave up); withdraw requests nobody needs now."""
        with self._lock:
            events = self._events.get(run_id, [])
            if event in events:
                events.remove(event)
            if not events:
                self._events.pop(run_id, None)
            withdrawn = [asked for asked in self._asked if asked not in self._events]
            self._asked.difference_update(withdrawn)
            listener = self._listener
        if not withdrawn or listener is None:
            return
        from django.db import DatabaseError

        from . import get_backend

        backend = get_backend()
        for asked in withdrawn:
            try:
                backend.want_wakeups(listener, DONE_CHANNEL, asked, False)
            except DatabaseError:
                # Left behind, the request costs only notifications nobody reads; the
                # next request drops it once the listener's connection is gone.
                logger.warning("could not withdraw the wake-up request for run %s", asked, exc_info=True)


run_waiters = _RunWaiters()

_hooks_lock = threading.Lock()
_hooks_connected = False  # guarded by _hooks_lock


def _connect_stop_hooks() -> None:
    """Connect the receivers that stop the waiter's listener (once, when it first starts)."""
    global _hooks_connected
    with _hooks_lock:
        if _hooks_connected:
            return
        from django.core.signals import setting_changed
        from django.db.backends.signals import connection_created

        connection_created.connect(_stop_before_database_is_created_or_dropped, dispatch_uid="openworkflow-waiter")
        setting_changed.connect(_stop_when_databases_change, dispatch_uid="openworkflow-waiter")
        _hooks_connected = True


def _stop_before_database_is_created_or_dropped(sender: Any, connection: Any, **kwargs: Any) -> None:
    # Django connects to no database in particular (NO_DB_ALIAS) only to create,
    # clone or drop one: a test run's setup and teardown, whatever the runner
    # (teardown_databases -> destroy_test_db). PostgreSQL refuses to drop a
    # database another session is connected to, and the listener is one.
    from django.db.backends.base.base import NO_DB_ALIAS

    if connection.alias == NO_DB_ALIAS:
        run_waiters.close()


def _stop_when_databases_change(sender: Any, setting: str, **kwargs: Any) -> None:
    # The listener connected with the settings of its day; the next waiter starts one with the
    # new ones. Not waiting for it to end: tests change settings often, and nothing is dropped here.
    if setting in ("DATABASES", "OPENWORKFLOW"):
        run_waiters.close(wait=False)
