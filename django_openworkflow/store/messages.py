"""Signals (to one run, buffered) and events (broadcast to the runs waiting for them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, transaction

from ..errors import RunNotFound, SignalError
from ..models import Event, Signal, StepAttempt, WorkflowRun
from ..states import FINISHED_STATUSES, StepKind, StepStatus
from .journal import JournalOps
from .records import EVENT_RUN_KEY_PREFIX, EventOutcome, EventStart, StartedRun, event_run_key

__all__ = ["EVENT_RUN_KEY_PREFIX", "EventOutcome", "EventStart", "MessageOps", "event_run_key"]


class MessageOps(JournalOps):
    """Delivering signals and events, in the sender's transaction."""

    if TYPE_CHECKING:  # from RunOps, next to this class in the backend
        insert_run: Callable[..., tuple[StartedRun, bool]]

    def send_signal(self, run_id: Any, name: str, data: Any, idempotency_key: str | None) -> bool:
        """Store a signal for a run and hand it to a wait for that name if one is open.

        Returns True if it was delivered now, False if it is buffered for the
        next wait (or was a duplicate of an earlier send with the same key).
        A deadlock's victim (the run's row against a worker waking its parent)
        is sent again, whole (:meth:`retrying`).
        """
        return self.retrying(lambda: self._send_signal(run_id, name, data, idempotency_key))

    def _send_signal(self, run_id: Any, name: str, data: Any, idempotency_key: str | None) -> bool:
        with self.write_lock(), transaction.atomic(using=self.alias):
            status = WorkflowRun.objects.select_for_update().filter(id=run_id).values_list("status", flat=True).first()
            if status is None:
                raise RunNotFound(f"no workflow run with id {run_id}")
            if status in FINISHED_STATUSES:
                raise SignalError(f"workflow run {run_id} is {status}; signals can only be sent to unfinished runs")
            try:
                with transaction.atomic(using=self.alias):
                    signal = Signal.objects.create(
                        workflow_run_id=run_id, name=name, data=data, idempotency_key=idempotency_key
                    )
            except IntegrityError:
                return False  # the same key was sent before: delivered once
            waiting = (
                StepAttempt.objects.filter(
                    workflow_run_id=run_id, kind=StepKind.SIGNAL, status=StepStatus.RUNNING, context__signal=name
                )
                .order_by("id")
                .first()
            )
            if waiting is None:
                return False
            now = self.now()
            Signal.objects.filter(id=signal.id).update(consumed_by=waiting, consumed_at=now)
            return self._deliver(waiting, {"signal_id": signal.id, "data": data}, now)

    def send_event(self, event_type: str, payload: Any, idempotency_key: str | None) -> int:
        """Record an event and wake every run waiting for its type with a pattern it contains.

        Returns how many runs it woke; a repeated key returns the first send's count.
        """
        return self.publish_event(event_type, payload, idempotency_key).woke

    def publish_event(
        self,
        event_type: str,
        payload: Any,
        idempotency_key: str | None,
        starts: Sequence[EventStart] = (),
        subscribers: Sequence[str] = (),
    ) -> EventOutcome:
        """:meth:`send_event`, which also starts a run for each of ``starts``, in the same transaction.

        The client picks the starts (the workflows subscribed to the event
        whose match the payload contains: they live in code, not in the
        database). Each run's idempotency key is :func:`event_run_key` of the
        new event row, so a workflow starts once per event; a repeated
        ``idempotency_key`` records nothing, starts nothing, and returns the
        first send's count and the runs it started (``created`` False) among
        ``subscribers``, the names of the workflows subscribed to the type.
        A deadlock's victim is sent again, whole (:meth:`retrying`).
        """
        return self.retrying(lambda: self._publish_event(event_type, payload, idempotency_key, starts, subscribers))

    def _publish_event(
        self,
        event_type: str,
        payload: Any,
        idempotency_key: str | None,
        starts: Sequence[EventStart],
        subscribers: Sequence[str],
    ) -> EventOutcome:
        with self.write_lock(), transaction.atomic(using=self.alias):
            self.lock_event_type(event_type)
            try:
                with transaction.atomic(using=self.alias):
                    event = Event.objects.create(
                        event_type=event_type, payload=payload, idempotency_key=idempotency_key
                    )
            except IntegrityError:
                first = Event.objects.get(event_type=event_type, idempotency_key=idempotency_key)
                earlier = WorkflowRun.objects.filter(
                    workflow_name__in=sorted({*subscribers, *(start.workflow_name for start in starts)}),
                    idempotency_key=event_run_key(first.id),
                ).order_by("workflow_name")
                started = [(StartedRun(run_id, queue), False) for run_id, queue in earlier.values_list("id", "queue")]
                return EventOutcome(first.id, int(first.woke), started, repeat=True)
            started = [self.insert_run(**start.run_fields(event.id)) for start in starts]
            waiting = StepAttempt.objects.filter(
                kind=StepKind.EVENT, status=StepStatus.RUNNING, context__event=event_type
            ).order_by("id")
            matching = self.event_waits(waiting, payload)
            if not matching:
                return EventOutcome(event.id, 0, started)
            # Lock the runs (in id order: no deadlocks between senders) so that a
            # worker about to park on the wait sees the delivery.
            run_ids = sorted({attempt.workflow_run_id for attempt in matching})
            list(WorkflowRun.objects.select_for_update().filter(id__in=run_ids).values_list("id"))
            now = self.now()
            output = {"event_id": event.id, "payload": payload}
            delivered = sum(self._deliver(attempt, output, now) for attempt in matching)
            Event.objects.filter(id=event.id).update(woke=delivered)
            return EventOutcome(event.id, delivered, started)

    def _deliver(self, attempt: StepAttempt, output: dict[str, Any], now: Any) -> bool:
        """Complete a still-open waiting attempt with ``output`` and wake its run if it is parked."""
        completed = StepAttempt.objects.filter(id=attempt.id, status=StepStatus.RUNNING).update(
            status=StepStatus.COMPLETED, output=output, finished_at=now
        )
        if completed:
            WorkflowRun.objects.parked().filter(id=attempt.workflow_run_id).update(available_at=now, updated_at=now)
        return bool(completed)
