"""The worker: claim due runs in batches, execute them on slot threads, heartbeat, stop cleanly.

One main thread claims; ``concurrency`` slot threads execute slices, each
with its own Django connection that it keeps across slices; one heartbeat
thread extends the leases of the runs in flight with a single UPDATE.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Any

from django.db import DatabaseError, connections

from .conf import owf_settings
from .durations import Duration, parse_duration
from .engine.execute import execute_slice
from .store import get_backend
from .store.notify import DUE_CHANNEL
from .store.records import ClaimedRun

logger = logging.getLogger("django_openworkflow.worker")

# How long to back off after the database refused a claim or a heartbeat.
_ERROR_BACKOFF = (0.1, 5.0)


def recycle_connections() -> None:
    """Between slices: drop this thread's connections that broke or aged out.

    ``CONN_MAX_AGE = 0`` means "per request" to Django; a worker has no
    requests, so it keeps such connections open and replaces them only when
    they fail. A positive ``CONN_MAX_AGE`` is honoured.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.settings_dict.get("CONN_MAX_AGE") == 0 and not conn.errors_occurred:
            continue
        conn.close_if_unusable_or_obsolete()


class Worker:
    """Executes workflow runs from the database until stopped.

    ``run()`` blocks; ``stop()`` (or SIGTERM/SIGINT when ``run`` installs
    handlers) stops claiming, lets in-flight slices finish and returns. A
    second signal exits the process at once.
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        lease: Duration | None = None,
        poll_interval: Duration | None = None,
        burst: bool = False,
        worker_id: str | None = None,
    ) -> None:
        self.concurrency = owf_settings.concurrency if concurrency is None else int(concurrency)
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.lease: timedelta = parse_duration(owf_settings.lease if lease is None else lease)
        if self.lease < timedelta(seconds=1):
            raise ValueError(f"lease must be at least 1s, got {self.lease}")
        self.poll_interval = parse_duration(owf_settings.poll_interval if poll_interval is None else poll_interval)
        self.heartbeat_interval = self.lease / 3
        self.burst = burst
        self.store = get_backend()
        self.worker_id = worker_id or f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.slices_done = 0
        self._slots: queue.SimpleQueue[ClaimedRun | None] = queue.SimpleQueue()
        self._in_flight: dict[Any, ClaimedRun] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._heartbeat_stop = threading.Event()
        self._signals_seen = 0
        # When the heartbeat last renewed every lease this worker held.
        self._leases_renewed_at = time.monotonic()

    # -- control --

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once in-flight slices have finished."""
        self._stopping.set()
        self._wake.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals_seen += 1
        if self._signals_seen > 1:
            logger.warning("second signal: exiting now; leases of in-flight runs will expire")
            os._exit(1)
        logger.info(
            "%s received: finishing %d in-flight run(s), then exiting",
            signal.Signals(signum).name,
            len(self._in_flight),
        )
        self.stop()

    # -- main loop --

    def run(self, until: Callable[[], bool] | None = None, install_signal_handlers: bool = True) -> None:
        """Claim and execute runs until stopped (or ``until()`` is true, or burst work is done)."""
        previous_handlers = {}
        if install_signal_handlers and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous_handlers[signum] = signal.signal(signum, self._on_signal)
        threads = [
            threading.Thread(target=self._slot_loop, name=f"owf-slot-{i}", daemon=True) for i in range(self.concurrency)
        ]
        heartbeat = threading.Thread(target=self._heartbeat_loop, name="owf-heartbeat", daemon=True)
        for thread in [*threads, heartbeat]:
            thread.start()
        # Where the database notifies (PostgreSQL), a committed start, wake-up or
        # retry wakes the claim loop at once instead of at the next poll.
        # Polling stays as the safety net.
        listener = self.store.listener([DUE_CHANNEL], lambda channel, payload: self._wake.set())
        if listener is not None:
            listener.start()
            # LISTEN before the first claim, so nothing committed in between is missed.
            listener.connected.wait(2.0)
        try:
            self._claim_loop(until)
        finally:
            self._stopping.set()
            if listener is not None:
                listener.stop()
                listener.join(5)
            for _ in threads:
                self._slots.put(None)
            for thread in threads:
                thread.join()
            self._heartbeat_stop.set()
            heartbeat.join()
            connections.close_all()
            for signum, handler in previous_handlers.items():
                signal.signal(signum, handler)
        logger.info("worker %s stopped after %d slice(s)", self.worker_id, self.slices_done)

    def _claim_loop(self, until: Callable[[], bool] | None) -> None:
        errors = 0
        poll = self.poll_interval.total_seconds()
        while not self._stopping.is_set():
            # Clear before looking for work: a wake-up (notification, freed slot)
            # that arrives from here on makes the next wait return at once.
            self._wake.clear()
            if until is not None and until():
                return
            with self._lock:
                free = self.concurrency - len(self._in_flight)
            if free <= 0:
                self._wake.wait(poll)
                continue
            try:
                claimed = self.store.claim(self.worker_id, free, self.lease)
                errors = 0
            except DatabaseError as exc:
                errors += 1
                delay = min(_ERROR_BACKOFF[0] * 2 ** (errors - 1), _ERROR_BACKOFF[1])
                logger.warning("claim failed (%s); retrying in %.1fs", exc, delay)
                recycle_connections()
                self._stopping.wait(delay)
                continue
            with self._lock:
                for item in claimed:
                    self._in_flight[item.run.id] = item
            for item in claimed:
                self._slots.put(item)
            if len(claimed) == free:
                continue
            if self.burst and not claimed:
                with self._lock:
                    idle = not self._in_flight
                if idle:
                    return
            self._wake.wait(poll)

    # -- slots --

    def _slot_loop(self) -> None:
        try:
            while True:
                claimed = self._slots.get()
                if claimed is None:
                    return
                try:
                    self._execute(claimed)
                finally:
                    with self._lock:
                        self._in_flight.pop(claimed.run.id, None)
                        self.slices_done += 1
                    self._wake.set()
                    recycle_connections()
        finally:
            connections.close_all()

    def _execute(self, claimed: ClaimedRun) -> None:
        run = claimed.run
        renewal_window = self.lease.total_seconds() * 0.9

        def lease_valid() -> bool:
            # A run's lease runs from its claim or the last successful heartbeat.
            renewed = max(claimed.claimed_monotonic, self._leases_renewed_at)
            return time.monotonic() < renewed + renewal_window

        if claimed.fresh:
            logger.info("run %s (%s) started", run.id, run.workflow_name)
        try:
            result = execute_slice(claimed, lease_valid)
        except DatabaseError as exc:
            logger.warning("run %s (%s): database error, releasing it: %s", run.id, run.workflow_name, exc)
            self._release(claimed)
            return
        except Exception:
            logger.exception("run %s (%s): engine error, releasing it", run.id, run.workflow_name)
            self._release(claimed)
            return
        result.log(logger)

    def _release(self, claimed: ClaimedRun) -> None:
        """Hand a run back after an infrastructure error, so it is retried soon, not after the lease."""
        recycle_connections()
        self.store.release(claimed)  # never raises: a slot thread must not die

    # -- heartbeat --

    def _heartbeat_loop(self) -> None:
        try:
            while not self._heartbeat_stop.wait(self.heartbeat_interval.total_seconds()):
                with self._lock:
                    held = list(self._in_flight)
                started = time.monotonic()
                if not held:
                    self._leases_renewed_at = started
                    continue
                try:
                    self.store.extend_leases(self.worker_id, self.lease, held)
                    self._leases_renewed_at = started
                except DatabaseError as exc:
                    logger.warning("heartbeat failed: %s", exc)
                    recycle_connections()
        finally:
            connections.close_all()
