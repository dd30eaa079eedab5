"""The statuses and step kinds, as plain string enums.

They live apart from ``models.py`` so that the engine can name a status
without importing Django's database layer; the model fields take their
choices from here. Members compare equal to their string values. Labels
are translated lazily (``gettext_lazy``): reading them needs no settings,
and they compare equal to the English text the migrations hold.
"""

from __future__ import annotations

import enum

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class Choices(enum.StrEnum):
    """A string enum whose members carry a human label, usable as a model field's ``choices``."""

    label: str | Promise

    def __new__(cls, value: str, label: str | Promise) -> Choices:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    @classmethod
    def choices(cls) -> list[tuple[str, str | Promise]]:
        """``(value, label)`` pairs for a model field."""
        return [(member.value, member.label) for member in cls]

    @classmethod
    def values(cls) -> list[str]:
        """Every value, in declaration order."""
        return [member.value for member in cls]


class RunStatus(Choices):
    """Where a workflow run is in its life."""

    PENDING = "pending", _("Pending")
    """Started, never claimed yet (or scheduled for later through ``available_at``)."""
    RUNNING = "running", _("Running")
    """Held by a worker (``worker_id`` set) or parked until ``available_at`` (``worker_id`` NULL)."""
    COMPLETED = "completed", _("Completed")
    """Finished; ``output`` holds the workflow function's return value."""
    FAILED = "failed", _("Failed")
    """Finished with ``error``; nothing will run it again."""
    CANCELED = "canceled", _("Canceled")
    """Canceled; no worker writes to it any more."""
    CONTINUED = "continued", _("Continued as new")
    """Handed over to a fresh run (``ctx.continue_as_new``); that run carries on, linked by ``continued_from``."""


CLAIMABLE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING)
FINISHED_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED, RunStatus.CONTINUED)


class StepStatus(Choices):
    """The state of one step attempt."""

    RUNNING = "running", _("Running")
    """Started (or, for a sleep or a wait, parked) and not finished."""
    COMPLETED = "completed", _("Completed")
    """Finished; ``output`` is what replay returns."""
    FAILED = "failed", _("Failed")
    """Raised; ``error`` holds type, message and traceback."""


class StepKind(Choices):
    """What a step attempt records."""

    RUN = "run", _("Run")
    """``ctx.step.run``: a function call whose return value is memoized."""
    SLEEP = "sleep", _("Sleep")
    """``ctx.step.sleep``: a durable pause."""
    WORKFLOW = "workflow", _("Child workflow")
    """``ctx.step.run_workflow``: start a child run and wait for it."""
    SIGNAL = "signal", _("Wait for signal")
    """``ctx.step.wait_for_signal``: wait for a signal sent to this run."""
    EVENT = "event", _("Wait for event")
    """``ctx.step.wait_for_event``: wait for a broadcast event matching a pattern."""
    PATCH = "patch", _("Patch")
    """``ctx.patched``: this run took the new branch of a patched workflow."""
