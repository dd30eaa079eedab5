"""The in-memory backend's tables: one dataclass per model, with the model's field names."""

from __future__ import annotations

import copy
import json
import uuid
from dataclasses import dataclass, field
from dataclasses import fields as columns_of
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder

from ...definitions.flow import BLOCKED_UNTIL, DEFAULT_QUEUE
from ...states import CLAIMABLE_STATUSES, FINISHED_STATUSES, RunStatus
from ...store.records import (
    AttemptRecord,
    AttemptUpdate,
    AttributeWrite,
    ChildStart,
    NewAttempt,
    ProgressWrite,
)

if TYPE_CHECKING:
    pass


def _stored(value: Any) -> Any:
    """``value`` as a JSON column gives it back: encoded like the models' JSON fields, then decoded."""
    return None if value is None else json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _read(value: Any) -> Any:
    """A stored JSON value for a caller, who may change it without changing the store."""
    return copy.deepcopy(value)


# -- the tables: one dataclass per model, with the model's field names (``*_id`` for foreign keys) --


@dataclass
class RunRow:
    """A workflow run (``WorkflowRun``)."""

    id: uuid.UUID
    workflow_name: str
    version: str | None = None
    status: str = RunStatus.PENDING
    input: Any = None
    output: Any = None
    error: Any = None
    idempotency_key: str | None = None
    worker_id: str | None = None
    attempts: int = 0
    available_at: datetime = BLOCKED_UNTIL
    deadline_at: datetime | None = None
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    concurrency_counts_parked: bool = False
    fairness_key: str | None = None  # kept, not used: this backend claims fair queues oldest first
    fair_at: datetime | None = None
    blocked_at: datetime | None = None
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    debounce_key: str | None = None
    parent_step_attempt_id: int | None = None
    continued_from_id: uuid.UUID | None = None
    cancel_requested_at: datetime | None = None
    parent_close_policy: str = "abandon"
    closes_with: uuid.UUID | None = None
    closes_children: bool = False
    retention: timedelta | None = None
    subject_type: str | None = None
    subject_id: str | None = None
    trace_context: dict[str, str] | None = None
    wake_on_attempt_id: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_parked(self) -> bool:
        """Running with no worker holding it: sleeping, waiting, or backing off before a retry."""
        return self.status == RunStatus.RUNNING and self.worker_id is None

    @property
    def is_held(self) -> bool:
        """Running and held by a worker right now."""
        return self.status == RunStatus.RUNNING and self.worker_id is not None

    @property
    def is_claimable(self) -> bool:
        return self.status in CLAIMABLE_STATUSES

    def is_due(self, now: datetime) -> bool:
        return self.is_claimable and self.available_at <= now


RUN_COLUMNS = frozenset(column.name for column in columns_of(RunRow))


@dataclass
class AttemptRow:
    """A step attempt of a run's journal (``StepAttempt``)."""

    id: int
    workflow_run_id: uuid.UUID
    step_name: str
    kind: str
    status: str
    output: Any = None
    error: Any = None
    context: Any = None
    child_workflow_run_id: uuid.UUID | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    def record(self) -> AttemptRecord:
        return AttemptRecord(
            self.id,
            self.step_name,
            str(self.kind),  # plain strings, as a database gives them back (rows may hold the enums)
            str(self.status),
            _read(self.output),
            _read(self.error),
            _read(self.context),
            self.child_workflow_run_id,
        )


@dataclass
class SignalRow:
    """A signal sent to a run, buffered until a wait consumes it (``Signal``)."""

    id: int
    workflow_run_id: uuid.UUID
    name: str
    data: Any = None
    idempotency_key: str | None = None
    created_at: datetime | None = None
    consumed_by_id: int | None = None
    consumed_at: datetime | None = None


@dataclass
class EventRow:
    """A broadcast event (``Event``)."""

    id: int
    event_type: str
    payload: Any = None
    idempotency_key: str | None = None
    woke: int = 0
    created_at: datetime | None = None


@dataclass
class ApprovalRow:
    """An approval or a human task a run waits for (``Approval``); its statuses are ``ApprovalStatus``'s values."""

    id: int
    workflow_run_id: uuid.UUID
    attempt_id: int
    step_key: str
    name: str
    details: str
    assignees: dict[str, list[str]]
    created_at: datetime
    timeout_at: datetime
    status: str = "open"
    decided_by: str = ""
    decided_at: datetime | None = None
    comment: str = ""
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
    remind_every: timedelta | None = None
    next_remind_at: datetime | None = None
    escalate_at: datetime | None = None
    escalate_to: dict[str, list[str]] = field(default_factory=dict)
    escalated_at: datetime | None = None


@dataclass
class _Fenced:
    """What a fenced write does besides committing its pending changes (the arguments of ``_commit``)."""

    insert: NewAttempt | None = None
    inserts: list[NewAttempt] = field(default_factory=list)
    run_fields: dict[str, Any] = field(default_factory=dict)
    start_child: ChildStart | None = None
    wake_when_child_done: list[Any] | None = None
    wake_parent_of: int | None = None
    ended_badly: bool = False
    close_children: bool = False


def _spawns(change: AttemptUpdate | NewAttempt | ProgressWrite | AttributeWrite) -> bool:
    return isinstance(change, NewAttempt) and change.child is not None
