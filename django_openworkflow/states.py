"""The statuses and step kinds, as plain string enums.

They live apart from ``models.py`` so that the engine can name a status
without importing Django's database layer; the model fields take their
choices from here. Members compare equal to their string values.
"""

from __future__ import annotations

import enum


class Choices(enum.StrEnum):
    """A string enum whose members carry a human label, usable as a model field's ``choices``."""

    label: str

    def __new__(cls, value: str, label: str) -> Choices:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        """``(value, label)`` pairs for a model field."""
        return [(member.value, member.label) for member in cls]

    @classmethod
    def values(cls) -> list[str]:
        """Every value, in declaration order."""
        return [member.value for member in cls]


class RunStatus(Choices):
    """Where a workflow run is in its life."""

    PENDING = "pending", "Pending"
    """Started, never claimed yet (or scheduled for later through ``available_at``)."""
    RUNNING = "running", "Running"
    """Held by a worker (``worker_id`` set) or parked until ``available_at`` (``worker_id`` NULL)."""
    COMPLETED = "completed", "Completed"
    """Finished; ``output`` holds the workflow function's return value."""
    FAILED = "failed", "Failed"
    """Finished with ``error``; nothing will run it again."""
    CANCELED = "canceled", "Canceled"
    """Canceled; no worker writes to it any more."""


CLAIMABLE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)
FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


class StepStatus(Choices):
    """The state of one step attempt."""

    RUNNING = "running", "Running"
    """Started (or, for a sleep or a wait, parked) and not finished."""
    COMPLETED = "completed", "Completed"
    """Finished; ``output`` is what replay returns."""
    FAILED = "failed", "Failed"
    """Raised; ``error`` holds type, message and traceback."""


class StepKind(Choices):
    """What a step attempt records."""

    RUN = "run", "Run"
    """``ctx.step.run``: a function call whose return value is memoized."""
    SLEEP = "sleep", "Sleep"
    """``ctx.step.sleep``: a durable pause."""
    WORKFLOW = "workflow", "Child workflow"
    """``ctx.step.run_workflow``: start a child run and wait for it."""
    SIGNAL = "signal", "Wait for signal"
    """``ctx.step.wait_for_signal``: wait for a signal sent to this run."""
    EVENT = "event", "Wait for event"
    """``ctx.step.wait_for_event``: wait for a broadcast event matching a pattern."""
