"""Re-run from a step: which steps of a run's journal a new run can start from, and why not the others.

A re-run from step ``S`` is a new run of the same workflow, version and
input whose journal starts with a copy of the entries recorded before ``S``
(in journal order), each linked to the row it copies. Replay returns their
recorded results without running their code; ``S`` and everything after it
run again. It is refused where that replay could not be faithful:

- a child workflow was started before ``S``: a copy would share the child
  with the source run (its parent), or start it again out of order;
- a step before ``S`` had not completed when ``S`` started (it failed for
  good and the workflow went on, or it was still running or waiting): its
  recorded outcome is not a result a copy can return;
- a step before ``S`` was undone by its compensation in the source run: a
  copy would report done what was undone.

Completed sleeps, signal and event waits (their data is in the journal)
and patches are copied like steps. Signals the source run received are not:
a wait at ``S`` or after it waits again, for a signal sent to the new run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..formatting import short_id
from ..states import StepKind, StepStatus

COMPENSATION_PREFIX = "compensate:"
"""The durable key of a step's compensation is this prefix and the step's key (``engine/execute.py``)."""

STEPS_NAMED = 10
"""Steps an unknown-step refusal lists at most."""


class JournalEntry(Protocol):
    """What the refusals read of a step attempt (a ``StepAttempt`` row or an ``AttemptRecord``)."""

    id: int
    step_name: str
    kind: str
    status: str


def from_step_refusals(attempts: Sequence[JournalEntry]) -> dict[str, str]:
    """Each step of the journal (in order of first appearance) -> why a re-run cannot start from it ('' if it can).

    One pass over ``attempts``, which are in journal order (by id).
    """
    compensated = {
        attempt.step_name[len(COMPENSATION_PREFIX) :]
        for attempt in attempts
        if attempt.step_name.startswith(COMPENSATION_PREFIX) and attempt.status == StepStatus.COMPLETED
    }
    refusals: dict[str, str] = {}
    unsettled: dict[str, str] = {}  # steps seen without a completed attempt yet -> their latest status
    blocker = ""  # the first reason that holds for every later step (a child, an undone step)
    for attempt in attempts:
        key = attempt.step_name
        if key not in refusals:
            refusals[key] = blocker or _unsettled_reason(unsettled)
        if attempt.kind == StepKind.WORKFLOW and not blocker:
            child = getattr(attempt, "child_workflow_run_id", None)
            started = f"started child run {short_id(child)}" if child else "started a child run"
            blocker = (
                f"step {key!r} before it {started}; a copy would share that child with this run "
                f"(re-run from {key!r} or an earlier step)"
            )
        if attempt.status == StepStatus.COMPLETED:
            unsettled.pop(key, None)
            if key in compensated and not blocker:
                blocker = (
                    f"step {key!r} before it was undone by its compensation in this run; a copy would report "
                    f"it done (re-run from {key!r} or an earlier step)"
                )
        else:
            unsettled[key] = str(attempt.status)
    return refusals


def _unsettled_reason(unsettled: dict[str, str]) -> str:
    if not unsettled:
        return ""
    key, status = next(iter(unsettled.items()))
    return (
        f"step {key!r} before it had not completed ({status}); a copy cannot replay how the workflow went on "
        f"without its result (re-run from {key!r} or an earlier step)"
    )


def from_step_refusal(attempts: Sequence[JournalEntry], step: Any) -> str:
    """Why a re-run cannot start from ``step`` ('' if it can)."""
    if not isinstance(step, str) or not step.strip():
        return f"the step to re-run from must be a step's name, got {step!r:.80}"
    refusals = from_step_refusals(attempts)
    if step not in refusals:
        names = list(refusals)
        listed = ", ".join(names[:STEPS_NAMED]) + (", ..." if len(names) > STEPS_NAMED else "")
        steps = f"its steps: {listed}" if names else "its journal is empty"
        return f"it has no step {step!r:.80} in its journal ({steps})"
    return refusals[step]


def copied_attempts(attempts: Iterable[Any], step: str) -> list[Any]:
    """The attempts a re-run from ``step`` copies: the completed ones recorded before its first attempt."""
    copies = []
    for attempt in attempts:
        if attempt.step_name == step:
            break
        if attempt.status == StepStatus.COMPLETED:
            copies.append(attempt)
    return copies
