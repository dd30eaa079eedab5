"""The in-memory backend's signals and events (``store/messages.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...errors import RunNotFound, SignalError
from ...states import StepKind, StepStatus
from ...store.core import contains
from ...store.records import (
    EventOutcome,
    EventStart,
    StartedRun,
    event_run_key,
)

if TYPE_CHECKING:
    pass
from .rows import AttemptRow, EventRow, SignalRow, _read, _stored
from .runs import RunOps


class MessageOps(RunOps):
    """Signals and events."""

    def send_signal(self, run_id: Any, name: str, data: Any, idempotency_key: str | None) -> bool:
        """Store a signal for a run and hand it to an open wait for that name.

        True if delivered now; False if buffered, or a duplicate of an earlier send with the same key.
        """
        with self.lock:
            run = self.runs.get(run_id)
            if run is None:
                raise RunNotFound(f"no workflow run with id {run_id}")
            if run.is_finished:
                raise SignalError(f"workflow run {run_id} is {run.status}; signals can only be sent to unfinished runs")
            if idempotency_key is not None and any(
                s.workflow_run_id == run_id and s.name == name and s.idempotency_key == idempotency_key
                for s in self.signals.values()
            ):
                return False  # the same key was sent before: delivered once
            now = self.now()
            signal = SignalRow(next(self._signal_ids), run_id, name, _stored(data), idempotency_key, now)
            self.signals[signal.id] = signal
            waiting = next(
                (
                    a
                    for a in self.attempts.values()
                    if a.workflow_run_id == run_id
                    and a.kind == StepKind.SIGNAL
                    and a.status == StepStatus.RUNNING
                    and (a.context or {}).get("signal") == name
                ),
                None,
            )
            if waiting is None:
                return False
            signal.consumed_by_id, signal.consumed_at = waiting.id, now
            return self._deliver(waiting, {"signal_id": signal.id, "data": _read(signal.data)}, now)

    def send_event(self, event_type: str, payload: Any, idempotency_key: str | None) -> int:
        """Record an event and wake every run waiting for its type with a pattern it contains; how many."""
        return self.publish_event(event_type, payload, idempotency_key).woke

    def publish_event(
        self,
        event_type: str,
        payload: Any,
        idempotency_key: str | None,
        starts: Sequence[EventStart] = (),
        subscribers: Sequence[str] = (),
    ) -> EventOutcome:
        """:meth:`send_event`, which also starts a run for each of ``starts`` (see ``MessageOps.publish_event``)."""
        with self.lock:
            first = next(
                (
                    e
                    for e in self.events.values()
                    if idempotency_key is not None
                    and e.event_type == event_type
                    and e.idempotency_key == idempotency_key
                ),
                None,
            )
            if first is not None:
                names = {*subscribers, *(start.workflow_name for start in starts)}
                earlier = sorted(
                    (run for run in self.runs.values() if run.workflow_name in names),
                    key=lambda run: run.workflow_name,
                )
                key = event_run_key(first.id)
                started = [(StartedRun(run.id, run.queue), False) for run in earlier if run.idempotency_key == key]
                return EventOutcome(first.id, first.woke, started, repeat=True)
            now = self.now()
            event = EventRow(next(self._event_ids), event_type, _stored(payload), idempotency_key, 0, now)
            self.events[event.id] = event
            started = [self.insert_run(**start.run_fields(event.id)) for start in starts]
            waiting = [
                a
                for a in self.attempts.values()
                if a.kind == StepKind.EVENT
                and a.status == StepStatus.RUNNING
                and (a.context or {}).get("event") == event_type
            ]
            output = {"event_id": event.id, "payload": _read(event.payload)}
            event.woke = sum(self._deliver(a, output, now) for a in self.event_waits(waiting, event.payload))
            return EventOutcome(event.id, event.woke, started)

    def event_waits(self, waits: Iterable[AttemptRow], payload: Any) -> list[AttemptRow]:
        """The open event waits among ``waits`` whose ``context["match"]`` the payload contains."""
        return [a for a in waits if contains(payload, (a.context or {}).get("match"))]

    def _deliver(self, attempt: AttemptRow, output: dict[str, Any], now: datetime) -> bool:
        """Complete a still-open waiting attempt with ``output`` and wake its run if it is parked."""
        if attempt.status != StepStatus.RUNNING:
            return False
        attempt.status, attempt.output, attempt.finished_at = StepStatus.COMPLETED, _stored(output), now
        run = self.runs.get(attempt.workflow_run_id)
        if run is not None and run.is_parked:
            self._update(run, now, available_at=now)
        return True
