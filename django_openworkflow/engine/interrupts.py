"""How the engine leaves a workflow function (the interrupts), and how it stores an error."""

from __future__ import annotations

import traceback
from datetime import datetime, timedelta
from typing import Any

from ..definitions.payload import storable_text
from ..errors import NonRetryableError, RetryAfter, StepUsageError, error_type
from ..store.records import ChildStart, EngineInterrupt, NewAttempt


class Suspend(EngineInterrupt):
    """Unwinds the workflow function to park the run until ``until``.

    An :class:`EngineInterrupt` (a ``BaseException``), so that ``except
    Exception`` in user code cannot swallow it; ``finally:`` blocks still run.
    """

    def __init__(
        self,
        until: datetime,
        reason: str,
        insert: NewAttempt | None = None,
        start_child: ChildStart | None = None,
        wake_when_child_done: list[Any] | None = None,
        written: bool = False,
        wake_on_attempt: int | None = None,
        note: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.note = note  # kept on the run while it is parked: a step's retry backoff says which error
        self.written = written  # the park was already committed (signal and event waits)
        self.until = until
        self.reason = reason
        self.insert = insert
        self.start_child = start_child
        self.wake_when_child_done = wake_when_child_done
        self.wake_on_attempt = wake_on_attempt


class ContinueAsNew(EngineInterrupt):
    """Unwinds the workflow function to hand the run over to a fresh run with ``input``."""

    def __init__(self, input: Any, version: str | None) -> None:
        super().__init__("continue as new")
        self.input = input
        self.version = version


class CancelRun(EngineInterrupt):
    """Unwinds the workflow function of a run whose cancel was requested, before it starts anything new."""


class FailRun(EngineInterrupt):
    """Unwinds the workflow function to fail the run at once, with no retry."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = error


def error_from_exception(exc: BaseException, step: str | None = None) -> dict[str, Any]:
    """The stored shape of an error: type, message, traceback (no local values), step.

    ``type`` is :func:`~django_openworkflow.errors.error_type` of the exception's class.
    """
    kind = type(exc)
    try:
        message = str(exc)
        trace = "".join(traceback.format_exception(exc))
    except Exception as broken:  # a __str__ that raises must not take the engine down with it
        message = f"<{kind.__qualname__} whose str() raised {type(broken).__name__}>"
        trace = "".join(traceback.format_tb(exc.__traceback__))
    # Text from user code is stored whatever it holds: NULs and lone surrogates become escapes.
    error: dict[str, Any] = {
        "type": storable_text(error_type(kind)),
        "message": storable_text(message),
        "traceback": storable_text(trace),
    }
    if step is not None:
        error["step"] = step
    return error


def retry_decision(exc: BaseException) -> tuple[bool, timedelta | None]:
    """Whether a step's exception may be retried, and after what fixed delay (``RetryAfter``)."""
    retryable = not isinstance(exc, (NonRetryableError, StepUsageError))
    return retryable, exc.delay if isinstance(exc, RetryAfter) else None


def retry_note(scope: str, failures: int, max_attempts: int) -> dict[str, Any]:
    """What a run parked for a retry carries in its error (the ``retry`` key): the admin, CLI and API show it.

    ``scope`` is ``step`` (a step's retry backoff) or ``workflow`` (the
    workflow's own retry policy); ``failures`` counts the failed attempts so
    far, ``max_attempts`` is the policy's (0: unlimited). The note is dropped
    when the run executes again (see ``Slice``).
    """
    return {"scope": scope, "failures": failures, "max_attempts": max_attempts}


def retry_detail(what: str, error: dict[str, Any], failures: int, max_attempts: int, at: datetime) -> str:
    """The worker's line for a retry: ``step 'charge' failed (attempt 2 of 5, ValueError: no); next attempt at ...``.

    ``what`` names what failed (``step 'charge'``, ``the workflow``); ``max_attempts`` 0 is unlimited.
    """
    of = f" of {max_attempts}" if max_attempts else ""
    cause = ": ".join(str(error[key]) for key in ("type", "message") if error.get(key))
    return f"{what} failed (attempt {failures}{of}, {cause}); next attempt at {at.isoformat(timespec='seconds')}"


def engine_error(kind: str, message: str, step: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": kind, "message": message}
    if step is not None:
        error["step"] = step
    return error
