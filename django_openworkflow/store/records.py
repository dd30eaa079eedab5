"""Plain records that cross the store's boundary, and the store's control-flow exceptions.

The engine sees runs and step attempts only as these dataclasses, never
as ORM rows, so the schema can change without touching replay.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True)
class ConnectionRoom:
    """How many more connections this process may open to the database now, and the limit that says so."""

    free: int  # below zero when the limit is already passed
    limit: int
    what: str  # which limit binds: "max_connections", "the role's CONNECTION LIMIT" ...


class EngineInterrupt(BaseException):
    """Base of the engine's own control flow: suspending, failing, losing the run, a failed write.

    A ``BaseException`` so that a workflow's ``except Exception:`` cannot
    swallow it; the engine tells these apart from whatever user code raises,
    ``SystemExit`` and ``KeyboardInterrupt`` included.
    """


class LeaseLost(EngineInterrupt):
    """This worker no longer holds the run (lease taken over, run canceled or deleted)."""


class LeaseLapsed(LeaseLost):
    """This worker could not renew the run's lease in time: it starts nothing more and hands the run back."""


class CancelRequested(EngineInterrupt):
    """The run's cancel was requested: the write kept the completions it carried and started nothing.

    The engine then runs the run's compensations and ends it canceled.
    """


class StoreUnavailable(EngineInterrupt):
    """The journal could not be read or written; the slice is abandoned.

    Raised by the store's fenced operations in place of the database error
    (kept as ``__cause__``), so that a workflow's ``except Exception:``
    around a step cannot swallow it and carry on with a journal that missed
    a write.
    """


@dataclass(frozen=True)
class StartedRun:
    """A run a start inserted, or found under its idempotency or debounce key."""

    id: uuid.UUID
    queue: str


@dataclass(frozen=True)
class RunRecord:
    """What the engine knows of a run it holds."""

    id: uuid.UUID
    workflow_name: str
    version: str | None
    input: Any
    attempts: int
    deadline_at: datetime | None
    parent_step_attempt_id: int | None
    error: dict[str, Any] | None = None
    concurrency_key: str | None = None
    cancel_requested_at: datetime | None = None
    # For telemetry: the metrics' labels, the run's duration, the trace it continues.
    queue: str = "default"
    started_at: datetime | None = None
    trace_context: dict[str, str] | None = None
    # A re-run from a step starts with the journal it copied: its first slice reads it.
    rerun_from_step: str | None = None
    # It started children with a parent-close policy: its end closes them (fence.close_children).
    closes_children: bool = False


@dataclass(frozen=True)
class AttemptRecord:
    """One step attempt of the journal, as replay reads it."""

    id: int
    step_name: str
    kind: str
    status: str
    output: Any = None
    error: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    child_workflow_run_id: uuid.UUID | None = None


@dataclass(frozen=True)
class TakenFrom:
    """The worker that held a run until its lease ran out, and when it ran out (the run was taken back)."""

    worker_id: str
    lease_ended_at: datetime | None  # None where the store could not read it


@dataclass
class ClaimedRun:
    """A run this worker now holds, with the database time of the claim."""

    run: RunRecord
    worker_id: str
    claimed_at: datetime
    fresh: bool = False  # never claimed before: no history to load
    lease_expired: bool = False  # the previous holder died or stalled mid-slice
    taken_from: TakenFrom | None = None  # that holder, where the store knows it
    # Set by the heartbeat when someone asked to cancel the run (compensate_on_cancel) while this worker holds it.
    cancel_requested: bool = False
    # Set by the heartbeat when a renewal found the run no longer held by this worker (taken over, finished).
    # Both flags are written by the heartbeat thread and read by the slot's: one attribute store, never unset.
    lease_lost: bool = False
    claimed_monotonic: float = field(default_factory=time.monotonic)

    def clock(self) -> datetime:
        """The database clock now, estimated from the claim's timestamp and the time elapsed since."""
        return self.claimed_at + timedelta(seconds=time.monotonic() - self.claimed_monotonic)


@dataclass(frozen=True)
class RunOutcome:
    """A run's status with its output and error (what a parent reads of its child)."""

    status: str
    output: Any
    error: dict[str, Any] | None
    finished_at: datetime | None = None


@dataclass(frozen=True)
class DispatchState:
    """What a dispatcher reads of a run to send its next slice: finished, held or parked until when, where.

    Not :class:`~django_openworkflow.store.run_states.RunState`, the status a
    page shows.
    """

    status: str
    worker_id: str | None
    available_at: datetime
    parent_run_id: uuid.UUID | None
    queue: str = "default"
    parent_queue: str | None = None


@dataclass(frozen=True)
class DeliveredSignal:
    """A buffered signal a new wait took at once."""

    id: int
    data: Any


@dataclass
class AttemptUpdate:
    """Finish an attempt already in the journal."""

    attempt_id: int
    status: str
    finished_at: datetime
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class NewApproval:
    """The approval a new wait opens: its name, what is approved, and who may decide (``store/approvals.py``).

    A task that asks for a form (``ctx.wait_for_input``) names it too: its
    dotted path, the class of each of its fields, its initial data, and when
    it is due. A yes/no approval may need ``required`` approvals from
    distinct people, none of the ``excluded`` usernames. Its timers:
    re-notify the assignees every ``remind_every``; at ``escalate_at``, add
    the ``escalate_to`` assignees and notify them.
    """

    name: str
    details: str
    assignees: dict[str, list[str]]
    timeout_at: datetime
    form: str = ""
    form_fields: dict[str, str] = field(default_factory=dict)
    initial: dict[str, Any] | None = None
    due_at: datetime | None = None
    required: int = 1
    excluded: list[str] = field(default_factory=list)
    remind_every: timedelta | None = None
    escalate_at: datetime | None = None
    escalate_to: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ApprovalRecord:
    """An approval or a task as the client reads it to decide it (``store/approvals.py``)."""

    id: int
    run_id: Any
    step_key: str
    name: str
    details: str
    assignees: dict[str, list[str]]
    status: str
    created_at: datetime
    timeout_at: datetime
    decided_by: str = ""
    decided_at: datetime | None = None
    form: str = ""
    form_fields: dict[str, str] = field(default_factory=dict)
    initial: dict[str, Any] | None = None
    due_at: datetime | None = None
    required: int = 1
    excluded: list[str] = field(default_factory=list)
    signoffs: list[dict[str, Any]] = field(default_factory=list)
    claimed_by: str = ""
    claimed_at: datetime | None = None
    activity: list[dict[str, Any]] = field(default_factory=list)
    escalate_at: datetime | None = None
    escalate_to: dict[str, list[str]] = field(default_factory=dict)
    escalated_at: datetime | None = None

    @property
    def kind(self) -> str:
        """``"input"`` for a task that asks for a form, ``"decision"`` for a yes/no approval."""
        return "input" if self.form else "decision"


@dataclass(frozen=True)
class FiredTimer:
    """A task's reminder or escalation that fired: the approval after it, ``reason`` and whom to notify."""

    approval: ApprovalRecord
    workflow_name: str
    reason: str  # "reminder" or "escalation"
    notify: dict[str, list[str]]


@dataclass
class NewAttempt:
    """A step attempt to insert.

    ``child`` starts a child run linked to it, in the same transaction;
    the store fills in ``id`` and ``child_run_id`` when it writes the row.
    """

    step_name: str
    kind: str
    status: str
    started_at: datetime
    context: dict[str, Any] | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    finished_at: datetime | None = None
    child: ChildStart | None = None
    id: int | None = None
    child_run_id: uuid.UUID | None = None


@dataclass
class ChildStart:
    """A child run to insert, linked to the attempt inserted in the same transaction."""

    workflow_name: str
    version: str | None
    input: Any
    flow: dict[str, Any] = field(default_factory=dict)
    """The child's queue, priority and limits (``WorkflowSpec.flow_fields``)."""


EVENT_RUN_KEY_PREFIX = "event:"


def event_run_key(event_id: int) -> str:
    """The idempotency key of the runs an event starts: one run per (workflow, event row)."""
    return f"{EVENT_RUN_KEY_PREFIX}{event_id}"


@dataclass(frozen=True)
class EventStart:
    """A run an event starts: the workflow's latest version, the payload as input, its flow columns."""

    workflow_name: str
    version: str | None
    input: Any
    flow: dict[str, Any]
    debounce: tuple[str, timedelta, timedelta | None] | None = None

    def run_fields(self, event_id: int) -> dict[str, Any]:
        """``insert_run``'s arguments for the run event ``event_id`` starts: keyed by the event, or debounced."""
        return {
            "workflow_name": self.workflow_name,
            "version": self.version,
            "input": self.input,
            "available_at": None,
            "deadline_at": None,
            "idempotency_key": None if self.debounce is not None else event_run_key(event_id),
            "flow": self.flow,
            "debounce": self.debounce,
        }


@dataclass
class EventOutcome:
    """What ``publish_event`` did: the event row, the runs woken, the runs started."""

    event_id: int
    woke: int
    started: list[tuple[StartedRun, bool]] = field(default_factory=list)
    repeat: bool = False


@dataclass
class ProgressWrite:
    """A value ``ctx.publish`` set or a chunk ``ctx.stream(name).write`` appended, written with the next journal write.

    ``stream`` is None for a published value (``name`` is its key) and the
    stream's name for a chunk. ``position`` is where the call stands in the
    run's deterministic execution, so a replay reproduces it: a chunk's
    offset in its stream (the row is unique on run, stream and offset, and a
    second insert writes nothing), a value's count of progress calls before
    it (a stored value is replaced only by one of a later position).
    """

    name: str
    position: int
    value: Any
    stream: str | None = None


@dataclass
class AttributeWrite:
    """A value ``ctx.set_attribute`` set, written with the next journal write (``store/attributes.py``).

    ``kind`` is the declared type, ``value`` the checked value; ``position``
    is where the call stands in the run's deterministic execution (counted
    with the progress calls), so a replay's earlier value replaces nothing.
    """

    name: str
    position: int
    kind: type
    value: Any


Pending = list[AttemptUpdate | NewAttempt | ProgressWrite | AttributeWrite]
"""Finished attempts (and progress) the engine buffered; each fenced write commits them first."""


@dataclass(frozen=True, slots=True)
class Fence:
    """Who writes to a held run, when, and what the write carries: the first argument of every fenced write.

    The write goes through only while ``worker_id`` holds run ``run_id``
    (else :class:`LeaseLost`, nothing written); it is made at ``now`` (the
    engine's estimate of the database clock) and commits ``pending`` first.
    With ``unless_canceling`` it is refused with :class:`CancelRequested`
    once the run's cancel was requested, after writing the completions in
    ``pending``: the engine asks it of the writes that start something or
    end the run well, unless it is running the run's compensations.
    """

    run_id: Any
    worker_id: str
    now: datetime
    pending: Pending = field(default_factory=list)
    unless_canceling: bool = False
