"""The step whose code runs now: tracked by the slice, read by the watchdog's thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..states import StepKind, StepStatus
from ..store.records import Fence, NewAttempt, RunRecord

if TYPE_CHECKING:
    from ..store.interface import EngineStore
    from .history import History


@dataclass
class RunningStep:
    """The step whose code is running now, and its journal row once one is written."""

    key: str
    started_at: datetime
    started_monotonic: float
    attempt_id: int | None
    recorded_late: bool = False  # by the watchdog, while the step ran


class RunningStepTracking:
    """The slice's record of the step in progress (read by the watchdog's thread).

    A mixin of :class:`~django_openworkflow.engine.slice.Slice`, which sets
    the attributes below.
    """

    run: RunRecord
    store: EngineStore
    worker_id: str
    history: History
    in_step: str | None
    _running: RunningStep | None  # guarded by _step_lock
    _step_lock: threading.Lock

    if TYPE_CHECKING:

        def now(self) -> datetime: ...

    def begin_step(self, key: str, started: datetime, attempt_id: int | None, exclusive: bool = True) -> None:
        """A step's code starts; ``exclusive`` (sync code) refuses step calls until it ends."""
        if exclusive:
            self.in_step = key
        with self._step_lock:
            self._running = RunningStep(key, started, time.monotonic(), attempt_id)

    def has_running_step(self) -> bool:
        with self._step_lock:
            return self._running is not None

    def end_step(self) -> int | None:
        """The step's code returned or raised; returns its attempt id if its start was recorded."""
        self.in_step = None
        with self._step_lock:
            running, self._running = self._running, None
        if running is None:
            return None
        if running.recorded_late:
            self.history.count += 1
        return running.attempt_id

    def record_slow_step(self, older_than: float) -> bool:
        """From another thread: record the start of a step running longer than ``older_than`` seconds.

        The first step of a slice writes no start record, to keep a step
        boundary at one write; a step still running after a moment gets one,
        so the admin and the CLI show what the run is executing and since
        when. Its completion then updates that row.
        """
        with self._step_lock:
            running = self._running
            if running is None or running.attempt_id is not None:
                return False
            if time.monotonic() - running.started_monotonic < older_than:
                return False
            # Nothing is pending while a step runs whose start was not written,
            # so this write carries only the start (and stays fenced).
            attempt = NewAttempt(running.key, StepKind.RUN, StepStatus.RUNNING, started_at=running.started_at)
            running.attempt_id = self.store.record_step(Fence(self.run.id, self.worker_id, self.now()), attempt)
            running.recorded_late = True
            return True
