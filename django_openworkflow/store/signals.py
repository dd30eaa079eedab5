"""Signals (to one run, buffered) and events (broadcast to waiting runs), delivered in the sender's transaction.

A sender locks the target run's row before it looks for a waiting step, and
a worker that parks on a wait locks the same row (its fence) and re-checks
the wait in that transaction; so a delivery either finds the run parked and
wakes it, or is seen by the worker before it parks. Nothing is lost and
nothing waits for its timeout by mistake.
"""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, connections, transaction

from ..errors import RunNotFound, SignalError
from ..models import FINISHED_STATUSES, Event, RunStatus, Signal, StepAttempt, StepKind, StepStatus, WorkflowRun
from .db import alias, fetch_db_now, write_lock


def lock_event_type(using: str, event_type: str) -> None:
    """Serialize senders and new waiters of one event type (PostgreSQL; SQLite has one writer)."""
    if connections[using].vendor == "postgresql":
        with connections[using].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["openworkflow-event:" + event_type])


def _deliver(using: str, attempt: StepAttempt, output: dict[str, Any], now: Any) -> bool:
    """Complete a still-open waiting attempt with ``output`` and wake its run if it is parked."""
    completed = (
        StepAttempt.objects.using(using)
        .filter(id=attempt.id, status=StepStatus.RUNNING)
        .update(status=StepStatus.COMPLETED, output=output, finished_at=now)
    )
    if completed:
        WorkflowRun.objects.using(using).filter(
            id=attempt.workflow_run_id, status=RunStatus.RUNNING, worker_id__isnull=True
        ).update(available_at=now, updated_at=now)
    return bool(completed)


def send_signal(run_id: Any, name: str, data: Any, idempotency_key: str | None) -> bool:
    """Store a signal for a run and hand it to a wait for that name if one is open.

    Returns True if it was delivered now, False if it is buffered for the
    next wait (or was a duplicate of an earlier send with the same key).
    """
    using = alias()
    with write_lock(using), transaction.atomic(using=using):
        status = (
            WorkflowRun.objects.using(using)
            .select_for_update()
            .filter(id=run_id)
            .values_list("status", flat=True)
            .first()
        )
        if status is None:
            raise RunNotFound(f"no workflow run with id {run_id}")
        if status in FINISHED_STATUSES:
            raise SignalError(f"workflow run {run_id} is {status}; signals can only be sent to unfinished runs")
        try:
            with transaction.atomic(using=using):
                signal = Signal.objects.using(using).create(
                    workflow_run_id=run_id, name=name, data=data, idempotency_key=idempotency_key
                )
        except IntegrityError:
            return False  # the same key was sent before: delivered once
        waiting = (
            StepAttempt.objects.using(using)
            .filter(workflow_run_id=run_id, kind=StepKind.SIGNAL, status=StepStatus.RUNNING, context__signal=name)
            .order_by("id")
            .first()
        )
        if waiting is None:
            return False
        now = fetch_db_now(using)
        Signal.objects.using(using).filter(id=signal.id).update(consumed_by=waiting, consumed_at=now)
        return _deliver(using, waiting, {"signal_id": signal.id, "data": data}, now)


def consume_signal(using: str, run_id: Any, name: str, attempt_id: int, now: Any) -> Signal | None:
    """Inside a worker's fenced transaction: take the oldest buffered signal for a new wait."""
    signal = (
        Signal.objects.using(using)
        .filter(workflow_run_id=run_id, name=name, consumed_by__isnull=True)
        .order_by("id")
        .first()
    )
    if signal is not None:
        Signal.objects.using(using).filter(id=signal.id).update(consumed_by_id=attempt_id, consumed_at=now)
    return signal


def _contains(payload: Any, pattern: Any) -> bool:
    """JSON containment, like PostgreSQL's ``payload @> pattern``."""
    if isinstance(pattern, dict):
        return isinstance(payload, dict) and all(k in payload and _contains(payload[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(payload, list) and all(any(_contains(p, item) for p in payload) for item in pattern)
    return bool(payload == pattern and type(payload) is type(pattern))


def send_event(event_type: str, payload: Any, idempotency_key: str | None) -> int:
    """Record an event and wake every run waiting for its type with a pattern it contains.

    Returns how many runs it woke; a repeated key returns the first send's count.
    """
    using = alias()
    with write_lock(using), transaction.atomic(using=using):
        lock_event_type(using, event_type)
        try:
            with transaction.atomic(using=using):
                event = Event.objects.using(using).create(
                    event_type=event_type, payload=payload, idempotency_key=idempotency_key
                )
        except IntegrityError:
            first = Event.objects.using(using).get(event_type=event_type, idempotency_key=idempotency_key)
            return first.woke
        waiting = StepAttempt.objects.using(using).filter(
            kind=StepKind.EVENT, status=StepStatus.RUNNING, context__event=event_type
        )
        if connections[using].vendor == "postgresql":
            waiting = waiting.filter(context__match__contained_by=payload)
            matching = list(waiting.order_by("id"))
        else:
            matching = [a for a in waiting.order_by("id") if _contains(payload, (a.context or {}).get("match"))]
        if not matching:
            return 0
        # Lock the runs (in id order: no deadlocks between senders) so that a
        # worker about to park on the wait sees the delivery.
        run_ids = sorted({a.workflow_run_id for a in matching})
        list(WorkflowRun.objects.using(using).select_for_update().filter(id__in=run_ids).values_list("id"))
        now = fetch_db_now(using)
        output = {"event_id": event.id, "payload": payload}
        delivered = sum(_deliver(using, attempt, output, now) for attempt in matching)
        Event.objects.using(using).filter(id=event.id).update(woke=delivered)
        return delivered
