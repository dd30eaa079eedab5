"""The statuses and step kinds, as plain string enums.

They live apart from ``models/`` so that the engine can name a status
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


class DisplayStatus(Choices):
    """What the admin, the command line and the API's ``display_status`` call a run: its status, made precise.

    Not stored: derived from the stored status, the worker holding the run,
    the note a run parked for a retry carries (its ``error``) and its open
    waits. A stored ``running`` is ``running`` while a worker holds the run,
    and else one of ``retrying``, ``waiting`` and ``parked``; every other
    value is the stored status. Each run is in exactly one.
    """

    PENDING = "pending", _("Pending")
    """Started, never claimed yet (or scheduled for later)."""
    RUNNING = "running", _("Running")
    """Held by a worker right now."""
    RETRYING = "retrying", _("Retrying")
    """Parked in a retry backoff: a step failed (or the workflow did, or the engine) and will be tried again."""
    WAITING = "waiting", _("Waiting")
    """Parked in a wait for a signal, an event or a child run."""
    PARKED = "parked", _("Parked")
    """Parked for another reason: sleeping, or waiting for a place under a concurrency limit."""
    COMPLETED = "completed", _("Completed")
    """Finished with an output."""
    FAILED = "failed", _("Failed")
    """Finished with an error."""
    CANCELED = "canceled", _("Canceled")
    """Canceled."""
    CONTINUED = "continued", _("Continued as new")
    """Handed over to a fresh run."""


WAITING_KINDS = (StepKind.SIGNAL, StepKind.EVENT, StepKind.WORKFLOW)
"""The step kinds whose open attempt makes a parked run ``waiting``."""


def display_state(status: str, worker_id: str | None, *, has_note: bool, waiting: bool) -> DisplayStatus:
    """The :class:`DisplayStatus` of a run: ``has_note`` when its ``error`` is set, ``waiting`` with an open wait.

    A parked run with a note parked after a failure (it retries); one
    without, with an open signal, event or child wait, waits; any other
    parked run is ``parked``. The same rules as ``store.run_states``'s filters.
    """
    if status != RunStatus.RUNNING or worker_id is not None:
        return DisplayStatus[status.upper()]  # every stored status is a display status of the same name
    if has_note:
        return DisplayStatus.RETRYING
    return DisplayStatus.WAITING if waiting else DisplayStatus.PARKED
