"""What a step's code may know of the attempt it runs in (``ctx.attempt()``), for idempotent side effects."""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ..errors import StepUsageError

T = TypeVar("T")


@dataclass(frozen=True)
class StepAttemptInfo:
    """The attempt of a ``ctx.step.run`` step (or of a compensation) whose code is running.

    ``number`` is 1 plus the failed attempts of this step that the journal
    holds: an error its code raised, a timeout, a worker that died or lost
    its lease during it. It is read from the journal, not drawn at random,
    so every attempt has its own number and a replay gives it the same one.
    """

    run_id: uuid.UUID
    step: str
    """The step's durable key (its name, numbered on repeats: ``charge``, ``charge:1``...)."""
    number: int

    @property
    def id(self) -> str:
        """``<run id>:<step>#<number>``: one per attempt (logs, or an API that keeps a failure under its key)."""
        return f"{self.run_id}:{self.step}#{self.number}"

    @property
    def idempotency_key(self) -> str:
        """``<run id>:<step>``: the same for every attempt of the step.

        Pass it to an API that deduplicates requests by key: a step whose
        code runs twice (a retry after a crash, or a worker frozen past its
        lease that resumes beside the worker that took the run over) then
        has its effect once.
        """
        return f"{self.run_id}:{self.step}"


_current: contextvars.ContextVar[StepAttemptInfo | None] = contextvars.ContextVar("owf_attempt", default=None)
"""The attempt whose code runs in this context; each step's code, on whatever thread, sees its own."""


def current_attempt() -> StepAttemptInfo:
    """The attempt whose code calls this; :class:`StepUsageError` outside a step's code."""
    attempt = _current.get()
    if attempt is None:
        raise StepUsageError("ctx.attempt() was called outside a step's code; call it from the function a step runs")
    return attempt


def in_attempt(attempt: StepAttemptInfo, fn: Callable[[], T]) -> Callable[[], T]:
    """``fn`` that runs with ``attempt`` as its current attempt (on this thread or one of its own)."""

    def call() -> T:
        token = _current.set(attempt)
        try:
            return fn()
        finally:
            _current.reset(token)

    return call


def set_attempt(attempt: StepAttemptInfo) -> contextvars.Token[StepAttemptInfo | None]:
    """Make ``attempt`` current in this context (an async step's task); reset with :func:`reset_attempt`."""
    return _current.set(attempt)


def reset_attempt(token: contextvars.Token[StepAttemptInfo | None]) -> None:
    _current.reset(token)
