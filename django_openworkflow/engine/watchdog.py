"""One thread per process that writes the start record of steps that run long.

The first step of a slice writes no start record, so that a step boundary
costs one write. A step that is still running after :data:`SLOW_STEP`
seconds gets its record from here, so the admin and the CLI can show what
a run is executing, and since when, within about a second — also for a
step whose code never returns.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ..store.records import EngineInterrupt

if TYPE_CHECKING:
    from ..store.interface import EngineStore
    from .slice import Slice

logger = logging.getLogger("django_openworkflow.engine")

SLOW_STEP = 0.5
"""Seconds a step runs before its start is recorded."""
_INTERVAL = 0.25


class Watchdog:
    """Looks at every slice in progress in this process four times a second."""

    def __init__(self) -> None:
        # Slot threads call watch() and forget(); the watchdog thread reads the set.
        self._slices: weakref.WeakSet[Slice] = weakref.WeakSet()  # guarded by _lock
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None  # guarded by _lock
        self._off = threading.local()  # each thread's own

    @contextmanager
    def off_on_this_thread(self) -> Iterator[None]:
        """Watch no slice this thread executes meanwhile.

        For slices executed inside a transaction that is not committed (the
        testing helpers, in a ``TestCase``): the watchdog writes from its own
        thread and connection, which cannot see that transaction's runs and,
        on MariaDB, would wait for its row locks.
        """
        depth = getattr(self._off, "depth", 0)
        self._off.depth = depth + 1
        try:
            yield
        finally:
            self._off.depth = depth

    def watch(self, slice_: Slice) -> None:
        if getattr(self._off, "depth", 0):
            return
        with self._lock:
            self._slices.add(slice_)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="owf-watchdog", daemon=True)
                self._thread.start()

    def forget(self, slice_: Slice) -> None:
        with self._lock:
            self._slices.discard(slice_)

    def _loop(self) -> None:
        stop = threading.Event()
        while not stop.wait(_INTERVAL):
            try:
                self._look()
            except Exception:  # never die: the next look tries again (watch() also restarts a dead thread)
                logger.exception("the slow-step watchdog failed; looking again in %gs", _INTERVAL)

    def _look(self) -> None:
        with self._lock:
            slices = list(self._slices)
        wrote: list[EngineStore] = []  # the stores written to (each slice carries its worker's)
        for slice_ in slices:
            try:
                if not slice_.record_slow_step(SLOW_STEP):
                    continue
            except EngineInterrupt:
                pass  # the run is gone or the database is away: the slice finds out itself
            except Exception:
                logger.exception("could not record the start of a slow step of run %s", slice_.run.id)
            if not any(store is slice_.store for store in wrote):
                wrote.append(slice_.store)
        for store in wrote:
            # Writes from here are rare: keep no connection open between them.
            store.close_connection()


watchdog = Watchdog()
