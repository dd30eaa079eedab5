"""Events from the application: send an event to its waiting runs, publish it to start its subscribers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..definitions.payload import to_json_value
from ..definitions.registry import WorkflowSpec, registry
from ..store import get_backend
from ..store.core import contains
from ..store.messages import EventStart
from .dispatcher import get_dispatcher
from .handle import RunHandle, check_key, check_name


def send_event(event: str, payload: Any = None, idempotency_key: str | None = None) -> int:
    """Broadcast an event; returns how many waiting runs it woke.

    Wakes every run parked in ``ctx.step.wait_for_event(..., event=event,
    match=pattern)`` whose pattern the payload contains, and starts a run of
    every workflow declared with ``on_event`` for this type whose match the
    payload contains (see :func:`publish_event`, which also returns those
    runs). With ``idempotency_key``, a repeat returns the first send's count,
    wakes nobody and starts nothing again.
    """
    return publish_event(event, payload, idempotency_key).woke


@dataclass(frozen=True)
class PublishedEvent:
    """What :func:`publish_event` did.

    ``woke``: how many waiting runs it woke. ``started``: the runs it
    started, one per subscribed workflow whose match the payload contains
    (by workflow name). On a repeated idempotency key (``repeat`` True)
    these are the first send's: the same count, and the runs it started
    with ``created`` False.
    """

    event_id: int
    woke: int
    started: list[RunHandle]
    repeat: bool = False


def publish_event(event: str, payload: Any = None, idempotency_key: str | None = None) -> PublishedEvent:
    """:func:`send_event`, returning the runs it started too.

    In the sender's transaction (inside ``transaction.atomic()`` nothing
    happens unless it commits), each workflow whose ``on_event`` names
    ``event`` with a match the payload contains gets one run of its highest
    version, with the payload as input and the workflow's queue, priority
    and limits. A run is started once per event: its idempotency key is
    ``event:<event id>``, and a repeated ``idempotency_key`` starts nothing.
    A subscriber's key function that fails raises :class:`InvalidArgument`
    before anything is written.
    """
    check_name("event type", event)
    check_key(idempotency_key)
    stored = to_json_value(payload, f"payload of event {event!r}", "payload")
    subscribers = registry.subscribed_to(event)
    sent = get_backend().publish_event(
        event,
        stored,
        idempotency_key,
        starts=_event_starts(event, subscribers, stored),
        subscribers=[spec.name for spec in subscribers],
    )
    for run, created in sent.started:
        if created:
            get_dispatcher().run_started(run.id, queue=run.queue)  # the Celery dispatcher sends after the commit
    return PublishedEvent(
        event_id=sent.event_id,
        woke=sent.woke,
        started=[RunHandle(run.id, created=created) for run, created in sent.started],
        repeat=sent.repeat,
    )


def _event_starts(event: str, subscribers: list[WorkflowSpec], payload: Any) -> list[EventStart]:
    """The runs an event starts: the subscribed workflows (latest versions) whose match the payload contains."""
    starts = []
    for spec in subscribers:
        if not any(sub.event == event and contains(payload, sub.pattern) for sub in spec.on_event):
            continue
        debounce_key = spec.debounce_key_for(payload)
        starts.append(
            EventStart(
                workflow_name=spec.name,
                version=spec.version,
                input=payload,
                flow=spec.flow_fields(payload),
                debounce=None
                if debounce_key is None or spec.debounce is None
                else (debounce_key, spec.debounce.delay, spec.debounce.max_delay),
            )
        )
    return starts
