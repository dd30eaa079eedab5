"""Exceptions raised by django-openworkflow.

Everything a user may want to catch derives from :class:`OpenWorkflowError`.
The engine's own control flow (suspending a run, losing a lease) uses
exceptions that derive from ``BaseException`` and live in
``engine/interrupts.py``: user code's ``except Exception`` cannot swallow them.
"""

from __future__ import annotations

from typing import Any

STEP_LIMIT_EXCEEDED = "StepLimitExceeded"
"""The ``type`` of a run's error when it reached ``OPENWORKFLOW["MAX_STEP_ATTEMPTS"]``."""

_PACKAGE = __name__.partition(".")[0]  # "django_openworkflow"


def error_type(kind: type[BaseException]) -> str:
    """The ``type`` stored in an error dict for an exception of class ``kind``.

    A bare class name for Python's built-in exceptions (``"ValueError"``) and
    for this package's own (``"StepTimeout"``, ``"StepFailed"``), as for the
    conditions the engine records without an exception (``"LeaseExpired"``,
    ``"DeadlineExceeded"``); ``"module.QualName"`` for every other class
    (``"myapp.billing.CardDeclined"``), so two classes of one name do not mix.
    """
    module = kind.__module__
    if module == "builtins" or module == _PACKAGE or module.startswith(f"{_PACKAGE}."):
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


def normalize_error_type(stored: str) -> str:
    """A stored error ``type`` in the form :func:`error_type` gives today.

    Before 0.3.0 this package's own exceptions were stored with their module
    (``"django_openworkflow.errors.StepTimeout"``); those read as the bare
    name. Every other value is returned as it is.
    """
    if stored.startswith(f"{_PACKAGE}."):
        return stored.rpartition(".")[2]
    return stored


class OpenWorkflowError(Exception):
    """Base class of every error this package raises on purpose."""


class WorkflowRegistrationError(OpenWorkflowError):
    """A workflow definition is invalid or clashes with another one."""


class UnknownWorkflowError(OpenWorkflowError):
    """No workflow with that name (and version) is registered in this process."""


class RunNotFound(OpenWorkflowError):
    """No workflow run has that id."""


class InvalidArgument(OpenWorkflowError, ValueError):
    """An argument of a call is wrong; ``argument`` names it (``"input"``, ``"deadline_at"`` ...), if known."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


class PayloadError(InvalidArgument):
    """A value cannot be stored: not JSON, NaN/Infinity, too large or too deep, or text no database stores."""


class PayloadTooLarge(PayloadError):
    """A value's JSON is over ``OPENWORKFLOW["MAX_PAYLOAD_BYTES"]`` (the HTTP API answers 413)."""


class OperationRefused(OpenWorkflowError):
    """A run operation (cancel, retry now, retry from the failed step, re-run) cannot apply to a run.

    ``operation`` names it, ``run_id`` the run, ``reason`` why: every front
    door (the client, the CLI, the admin) shows this same reason.
    """

    def __init__(self, operation: str, run_id: Any, reason: str) -> None:
        super().__init__(f"cannot {operation.replace('_', ' ')} run {run_id}: {reason}")
        self.operation = operation
        self.run_id = run_id
        self.reason = reason


class ForgetRefused(OperationRefused):
    """``forget`` found runs of the subject that have not finished; ``run_ids`` names them.

    Raised before anything is erased, unless ``reason`` says otherwise (a
    run made due again while the others were erased).
    """

    def __init__(self, subject: str, run_ids: list[Any], reason: str) -> None:
        ids = ", ".join(str(run_id) for run_id in run_ids)
        OpenWorkflowError.__init__(self, f"cannot forget {subject}: runs {reason}: {ids}")
        self.operation = "forget"
        self.run_id = run_ids[0]
        self.run_ids = run_ids
        self.reason = reason


class NonRetryableError(OpenWorkflowError):
    """Raise inside a step to fail it at once, whatever its retry policy."""


class RetryAfter(OpenWorkflowError):
    """Raise inside a step to retry it after exactly ``delay`` (e.g. a rate limit's Retry-After).

    The attempt still counts against the step's retry budget.
    """

    def __init__(self, delay: Any, message: str = "") -> None:
        from .durations import parse_duration

        self.delay = parse_duration(delay)
        super().__init__(message or f"retry after {self.delay.total_seconds():g}s")


class SignalError(OpenWorkflowError):
    """A signal cannot be sent (the run has finished)."""


class ApprovalError(OpenWorkflowError):
    """An approval cannot be decided: see the subclasses."""


class ApprovalNotFound(ApprovalError):
    """No approval has this id."""


class ApprovalNotAssigned(ApprovalError):
    """The user deciding is not among the approval's assignees (nor a superuser); nothing was delivered."""


class ApprovalClosed(ApprovalError):
    """The approval was decided already (the first decision wins), timed out, or its run ended.

    ``decided_by`` names who decided it first ("" when nobody did).
    """

    def __init__(self, message: str, decided_by: str = "") -> None:
        super().__init__(message)
        self.decided_by = decided_by


class TaskClaimed(ApprovalError):
    """Someone else holds the task (claimed, or reassigned to them): only they may decide, submit or release it.

    ``claimed_by`` names them. Nothing was written. A user with the
    ``django_openworkflow.reassign_approval`` permission may release or
    reassign it.
    """

    def __init__(self, message: str, claimed_by: str = "") -> None:
        super().__init__(message)
        self.claimed_by = claimed_by


class WrongTaskKind(ApprovalError):
    """A yes/no decision sent to a task that asks for a form, or a form sent to a yes/no approval; nothing delivered."""


class TaskFormUnavailable(ApprovalError):
    """A task's form no longer imports, or a field the task opened with is gone or of another class.

    The person submitting cannot fix it: the project's code changed under the
    open task. Nothing was delivered; the task stays open until it is
    submitted with a compatible form deployed, or it times out.
    """


class TaskFormInvalid(ApprovalError):
    """A task's form did not validate; nothing was delivered.

    ``errors`` holds the form's messages by field name (``"__all__"`` for the
    form's own ``clean()``), ``form`` the bound form, to show again with its
    errors.
    """

    def __init__(self, message: str, errors: dict[str, list[str]], form: Any = None) -> None:
        super().__init__(message)
        self.errors = errors
        self.form = form


class DeterminismError(OpenWorkflowError):
    """Replay took a different path from the one recorded in the journal."""


class StepTimeout(OpenWorkflowError):
    """A step's code ran longer than its ``timeout``: the attempt failed, and counts toward its retry budget.

    Sync code cannot be stopped: it was abandoned and may still be running
    (its result is dropped). Async code was cancelled.
    """


class StepUsageError(OpenWorkflowError):
    """A step API was called where it cannot work (inside another step, outside a run)."""


class StepFailed(OpenWorkflowError):
    """A step failed for good (its retries are spent or it is not retryable).

    Raised inside the workflow function, which may catch it to compensate or
    branch; uncaught, it fails the run. ``error`` is the recorded error dict
    (type, message, traceback).
    """

    def __init__(self, step_name: str, error: dict[str, Any]) -> None:
        self.step_name = step_name
        self.error = error
        super().__init__(f"step {step_name!r} failed: {error.get('type')}: {error.get('message')}")


class WorkflowFailed(OpenWorkflowError):
    """``handle.result()`` on a run that failed; ``error`` is the run's error dict."""

    def __init__(self, run_id: Any, error: dict[str, Any] | None) -> None:
        self.run_id = run_id
        self.error = error or {}
        super().__init__(f"workflow run {run_id} failed: {self.error.get('type')}: {self.error.get('message')}")


class PayloadUndecryptable(OpenWorkflowError):
    """A stored payload cannot be decrypted with the keys of ``OPENWORKFLOW["PAYLOAD_ENCRYPTION"]``.

    ``handle.result()`` raises it for a completed run whose output none of the
    configured keys opens; ``key_id`` names the key that encrypted it.
    """

    def __init__(self, message: str, key_id: str = "") -> None:
        super().__init__(message)
        self.key_id = key_id


class PayloadFileMissing(OpenWorkflowError):
    """A stored payload was offloaded to a file (``OPENWORKFLOW["PAYLOAD_OFFLOAD"]``) that the storage no longer has.

    ``handle.result()`` raises it for a completed run whose output file is
    gone; ``reference`` is the value's stored reference (storage alias and
    file name).
    """

    def __init__(self, message: str, reference: str = "") -> None:
        super().__init__(message)
        self.reference = reference


class WorkflowCanceled(OpenWorkflowError):
    """``handle.result()`` on a run that was canceled."""

    def __init__(self, run_id: Any) -> None:
        self.run_id = run_id
        super().__init__(f"workflow run {run_id} was canceled")


class ResultTimeout(OpenWorkflowError, TimeoutError):
    """``handle.result(timeout=...)`` gave up before the run finished."""


class ProgressTimeout(OpenWorkflowError, TimeoutError):
    """``handle.get_event(key, timeout=...)`` or ``handle.stream(name, timeout=...)`` gave up waiting."""


class EventNotPublished(OpenWorkflowError, LookupError):
    """``handle.get_event(key)`` on a run that finished without publishing ``key``: it never will."""
