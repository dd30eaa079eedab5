"""Execute one slice of one claimed run: replay to the next suspension or the end."""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..definitions.alerts import RunFailure
from ..definitions.payload import to_json_value
from ..definitions.registry import registry
from ..definitions.retry import DEFAULT_STEP_RETRY_POLICY, UNKNOWN_WORKFLOW_BACKOFF
from ..errors import PayloadError, StepFailed
from ..store.records import ClaimedRun, EngineInterrupt, Fence, LeaseLapsed, LeaseLost, StoreUnavailable
from .context import WorkflowContext
from .interrupts import (
    CancelRun,
    ContinueAsNew,
    FailRun,
    Suspend,
    engine_error,
    error_from_exception,
    retry_detail,
    retry_note,
)
from .slice import Slice
from .steps import StepApi
from .watchdog import watchdog

if TYPE_CHECKING:
    from ..store.interface import EngineStore

logger = logging.getLogger("django_openworkflow.engine")

ENGINE_ERROR_LIMIT = 3
"""Slices in a row that may end in an engine error before the run is failed."""
ENGINE_ERROR_BACKOFF = timedelta(seconds=1)
"""The wait before the first retry after an engine error; doubled after each."""
COMPENSATION_RETRY_POLICY = DEFAULT_STEP_RETRY_POLICY
"""How compensations are retried (10 attempts, backoff from 1 s)."""


class Outcome(enum.StrEnum):
    """How a slice ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    CONTINUED = "continued"  # handed over to a successor run (continue-as-new)
    PARKED = "parked"  # sleeping, waiting, or backing off before a retry
    RETRY = "retry"  # workflow-level failure, rescheduled
    CANCELED = "canceled"  # its cancel was requested: compensated, then canceled
    RELEASED = "released"  # an engine error: handed back, to be tried again shortly
    UNKNOWN_WORKFLOW = "unknown-workflow"  # this process lacks the name/version
    LEASE_LOST = "lease-lost"  # canceled, taken over, or deleted: wrote nothing


@dataclass(frozen=True)
class SliceResult:
    run_id: Any
    workflow_name: str
    outcome: Outcome
    seconds: float
    detail: str = ""
    # At the latest, when a parked, retrying or rescheduled run is next due
    # (for dispatchers that schedule a message for it); None otherwise. It may
    # be due sooner: a wait whose child already finished is due at once.
    wake_at: datetime | None = None
    # (id, queue) of a run that was waiting for this run's place under a
    # concurrency limit and is due now that the slice let go of it.
    woke: tuple[Any, str] | None = None
    # The slice started runs that a parked or finished parent does not announce:
    # children (start_workflow), a successor (continue-as-new).
    spawned: bool = False
    step_retry: bool = False  # parked for a step's retry backoff (RETRY is the workflow's own retry)

    def log(self, logger: logging.Logger) -> None:
        """One line: INFO when the run finished or is retried, DEBUG when it parked, WARNING when it lost its lease.

        The time is this slice's (one replay, from claim to outcome), not the run's: a run that slept
        for hours finishes with a slice of milliseconds. The run's own duration is on its page.
        """
        retried = self.step_retry or self.outcome == Outcome.RETRY
        level = logging.INFO if retried or self.outcome in (Outcome.COMPLETED, Outcome.FAILED) else logging.DEBUG
        if self.outcome in (Outcome.LEASE_LOST, Outcome.RELEASED):
            level = logging.WARNING
        detail = f": {self.detail}" if self.detail and self.outcome != Outcome.COMPLETED else ""
        logger.log(
            level,
            "run %s (%s) %s; this slice took %.1f ms%s",
            self.run_id,
            self.workflow_name,
            self.outcome,
            self.seconds * 1000,
            detail,
        )


def execute_slice(
    store: EngineStore, claimed: ClaimedRun, lease_valid: Callable[[], bool] | None = None
) -> SliceResult:
    """Run the claimed run's workflow function from the top, replaying its journal.

    ``store`` is the backend the run was claimed from (any :class:`~django_openworkflow.store.interface.EngineStore`:
    a database backend, or the in-memory one); every read and write goes to it.

    Every write is fenced on this worker still holding the run; when it does
    not, the slice ends with ``LEASE_LOST`` having written nothing more.
    ``lease_valid`` lets the caller veto new steps when it could not renew
    the lease (say its heartbeats fail): no step starts without a lease.
    """
    started = time.monotonic()
    run = claimed.run
    slices: list[Slice] = []
    try:
        outcome, detail, wake_at = _execute(store, claimed, lease_valid, slices)
    except LeaseLapsed:
        # The caller could not renew the lease: hand the run back now (fenced: a no-op if it was taken
        # over) rather than leave it to wait out a lease nobody renews.
        released = store.release(claimed, timedelta(0))
        outcome, wake_at = Outcome.LEASE_LOST, None
        detail = "the lease could not be renewed in time" + ("; handed back" if released else "")
    except LeaseLost:
        outcome, detail, wake_at = Outcome.LEASE_LOST, "the run was canceled or another worker holds it", None
    except StoreUnavailable as exc:
        if store.is_transient(exc.__cause__):
            # The connection or a lock: the caller releases the run, to be retried with backoff.
            assert exc.__cause__ is not None
            raise exc.__cause__ from None
        outcome, detail, wake_at = _engine_failure(store, claimed, exc.__cause__ or exc, slices)
    except Exception as exc:  # the engine's own failure: user code's exceptions are handled inside
        outcome, detail, wake_at = _engine_failure(store, claimed, exc, slices)
    spawned = bool(slices) and slices[0].spawned
    step_retry = outcome == Outcome.PARKED and bool(slices) and slices[0].backing_off
    elapsed = time.monotonic() - started
    return SliceResult(run.id, run.workflow_name, outcome, elapsed, detail, wake_at, None, spawned, step_retry)


def _engine_failure(
    store: EngineStore, claimed: ClaimedRun, exc: BaseException, slices: list[Slice]
) -> tuple[Outcome, str, datetime | None]:
    """Anything but a transient database error went wrong in the engine: release the run, or fail it.

    The run is handed back with an ``EngineError`` note and a short backoff.
    The note names the step whose result the failed slice could not keep;
    the next slice charges it one failed attempt, so the step's own retry
    budget bounds how often it runs. After :data:`ENGINE_ERROR_LIMIT`
    slices in a row end this way, the run is failed with that error.
    """
    run = claimed.run
    previous = run.error or {}
    occurrences = int(previous.get("occurrences", 0)) + 1 if previous.get("type") == "EngineError" else 1
    cause = error_from_exception(exc)
    error = engine_error("EngineError", f"{cause['type']}: {cause['message']}")
    error.update(traceback=cause["traceback"], occurrences=occurrences)
    step = slices[0].latest_new_step if slices else None
    if step is not None:
        error["step"] = step
    logger.error("run %s (%s): engine error %d of %d: %s", run.id, run.workflow_name, occurrences, ENGINE_ERROR_LIMIT,
                 error["message"], exc_info=exc)  # fmt: skip
    try:
        if occurrences >= ENGINE_ERROR_LIMIT:
            error["message"] += f" ({occurrences} slices in a row ended in an engine error: the run is failed)"
            fence = Fence(run.id, claimed.worker_id, claimed.clock())
            store.fail_run(fence, error, run.parent_step_attempt_id, run.attempts + 1)
            return Outcome.FAILED, error["message"], None
    except (LeaseLost, StoreUnavailable):
        logger.warning("run %s: could not record its failure; its lease will expire", run.id)
        return Outcome.LEASE_LOST, error["message"], None
    delay = ENGINE_ERROR_BACKOFF * 2 ** (occurrences - 1)
    store.release(claimed, delay, error)
    return Outcome.RELEASED, error["message"], claimed.clock() + delay


def _execute(
    store: EngineStore, claimed: ClaimedRun, lease_valid: Callable[[], bool] | None, slices: list[Slice]
) -> tuple[Outcome, str, datetime | None]:
    run = claimed.run
    spec = registry.get(run.workflow_name, run.version)
    overdue = run.deadline_at is not None and claimed.claimed_at > run.deadline_at
    if overdue and (spec is None or spec.on_failure is None):
        # Checked before the registry: a run past its deadline fails even on a
        # worker that does not have its workflow.
        error = _deadline_error(run.deadline_at)
        fence = Fence(run.id, claimed.worker_id, claimed.claimed_at)
        store.fail_run(fence, error, run.parent_step_attempt_id, run.attempts + 1)
        return Outcome.FAILED, error["message"], None
    if spec is None:
        return _reschedule_unknown(store, claimed)
    slice_ = Slice(store, claimed, spec, lease_valid)
    slices.append(slice_)
    watchdog.watch(slice_)
    try:
        # Overdue with an on_failure: it runs (its one step may pass the deadline), then the run fails.
        return _fail(slice_, _deadline_error(run.deadline_at)) if overdue else _replay(slice_)
    except CancelRun:
        # A write that would have started something, or ended the run, found its cancel
        # requested: it kept the completions it carried, which are compensated with the rest.
        return _cancel(slice_)
    finally:
        slice_.active = False
        watchdog.forget(slice_)


def _deadline_error(deadline: Any) -> dict[str, Any]:
    return engine_error("DeadlineExceeded", f"the run's deadline {deadline.isoformat()} has passed")


def _replay(slice_: Slice) -> tuple[Outcome, str, datetime | None]:
    """Call the workflow function from the top; how it leaves the slice decides the outcome.

    Raises :class:`CancelRun` when a write finds the run's cancel requested
    (see :meth:`Slice._journal`).
    """
    spec, run = slice_.spec, slice_.run
    try:
        if spec.is_async:
            from .aio import AsyncWorkflowContext, call_async

            result = call_async(spec, AsyncWorkflowContext(slice_))
        else:
            result = spec.fn(WorkflowContext(slice_))
        if slice_.in_step is not None:  # pragma: no cover - defensive
            raise RuntimeError("workflow returned from inside a step")
        output = to_json_value(result, f"output of workflow {run.workflow_name!r}", "output")
    except (Suspend, ContinueAsNew, CancelRun) as interrupt:
        if slice_.cancel_requested:  # replayed up to where it would wait or start something new
            return _cancel(slice_)
        if isinstance(interrupt, ContinueAsNew):
            successor = slice_.continue_as_new(interrupt)
            slice_.spawned = True
            return Outcome.CONTINUED, f"continued as run {successor}", None
        assert isinstance(interrupt, Suspend)
        if not interrupt.written:
            slice_.park(interrupt)
        return Outcome.PARKED, interrupt.reason, interrupt.until
    except FailRun as failure:  # the step cap, the deadline, a determinism error
        return _fail(slice_, failure.error)
    except PayloadError as exc:
        return _fail(slice_, error_from_exception(exc))
    except EngineInterrupt:
        raise
    except BaseException as exc:  # user code: any Exception, and SystemExit, KeyboardInterrupt ...
        return _workflow_failure(slice_, exc)
    slice_.complete(output)
    return Outcome.COMPLETED, "", None


def _workflow_failure(slice_: Slice, exc: BaseException) -> tuple[Outcome, str, datetime | None]:
    """An exception escaped the workflow function: retry the run by its policy or fail it."""
    error = error_from_exception(exc)
    step = getattr(exc, "step_name", None)
    if step is not None:
        error["step"] = step
    failed_step = exc.error if isinstance(exc, StepFailed) and isinstance(exc.error, dict) else {}
    if failed_step.get("child_error"):
        # A child's failure that nobody caught: the parent says what went wrong in the child, not only which child.
        error.update(child_error=failed_step["child_error"], child_run_id=failed_step.get("child_run_id"))
    attempts = slice_.run.attempts + 1
    policy = slice_.spec.retry_policy
    if policy.allows_another(attempts):
        wake = slice_.now() + policy.delay_after(attempts)
        deadline = slice_.run.deadline_at
        if deadline is None or wake <= deadline:
            note = {**error, "retry": retry_note("workflow", attempts, policy.maximum_attempts)}
            slice_.reschedule(wake, note, attempts)
            return Outcome.RETRY, retry_detail("the workflow", error, attempts, policy.maximum_attempts, wake), wake
    if slice_.compensations:
        try:
            failures = _compensate(slice_)
        except Suspend as suspend:  # a compensation waits for its retry: the run fails once they all ran
            slice_.park(suspend)
            return Outcome.PARKED, suspend.reason, suspend.until
        except FailRun as failure:  # the step limit or the deadline: no more steps can run
            failures = [failure.error]
        if failures:
            error["compensation_errors"] = failures
    return _fail(slice_, error, attempts)


def _fail(slice_: Slice, error: dict[str, Any], attempts: int | None = None) -> tuple[Outcome, str, datetime | None]:
    """Fail the run for good, once its ``on_failure`` step (if it declares one) has run."""
    hook = slice_.spec.on_failure
    if hook is not None:
        try:
            alert_error = _on_failure(slice_, hook, error, slice_.run.attempts + 1 if attempts is None else attempts)
        except Suspend as suspend:  # on_failure waits for its retry: the run fails once it ran
            slice_.park(suspend)
            return Outcome.PARKED, suspend.reason, suspend.until
        if alert_error is not None:
            error["on_failure_error"] = alert_error
    slice_.fail(error, attempts)
    return Outcome.FAILED, error["message"], None


ON_FAILURE_STEP = "on-failure"
"""The durable key of the step that calls a workflow's ``on_failure``."""


def _on_failure(
    slice_: Slice, hook: Callable[[RunFailure], Any], error: dict[str, Any], attempts: int
) -> dict[str, Any] | None:
    """Call ``on_failure`` as a durable step (retried as compensations are); its error if it failed for good.

    Replay makes it exactly-once: a worker that dies after it ran and before
    the run's failure is stored finds it completed in the journal.
    """
    run = slice_.run
    failure = RunFailure(run.id, run.workflow_name, run.version, run.input, dict(error), attempts)
    slice_.alerting = True
    try:
        StepApi(slice_).run(
            ON_FAILURE_STEP,
            functools.partial(_call_on_failure, hook, failure),
            retry_policy=COMPENSATION_RETRY_POLICY,
        )
    except StepFailed as failed:
        return failed.error
    finally:
        slice_.alerting = False
    return None


def _call_on_failure(hook: Callable[[RunFailure], Any], failure: RunFailure) -> None:
    result = hook(failure)
    if inspect.isawaitable(result):  # an async on_failure
        asyncio.run(_awaited(result))


def _cancel(slice_: Slice) -> tuple[Outcome, str, datetime | None]:
    """The run's cancel was requested: run the compensations of its completed steps, then end it canceled."""
    try:
        failures = _compensate(slice_)
    except Suspend as suspend:  # a compensation waits for its retry; the cancel is still requested then
        slice_.park(suspend)
        return Outcome.PARKED, suspend.reason, suspend.until
    except FailRun as failure:
        failures = [failure.error]
    undone = f" after {len(slice_.compensations)} compensations" if slice_.compensations else ""
    error = engine_error("Canceled", f"the run was canceled{undone}")
    if failures:
        error["compensation_errors"] = failures
    slice_.cancel(error)
    return Outcome.CANCELED, error["message"], None


def _compensate(slice_: Slice) -> list[dict[str, Any]]:
    """Undo the run's completed steps, latest first, each as a durable step ``compensate:<step>``.

    Each is retried by :data:`COMPENSATION_RETRY_POLICY`, whatever the
    workflow's step policy: an undo must be tried harder than a do.
    A compensation that fails for good does not stop the others; the errors
    are returned. Replay makes this exactly-once: a compensation that
    completed is not called again when the failed run is replayed after a
    crash or a compensation's retry.
    """
    api = StepApi(slice_)
    slice_.compensating = True
    failures = []
    for key, undo, output in reversed(slice_.compensations):
        try:
            api.run(f"compensate:{key}", functools.partial(_undo, undo, output), retry_policy=COMPENSATION_RETRY_POLICY)
        except StepFailed as failed:
            failures.append(failed.error)
    return failures


def _undo(undo: Any, output: Any) -> Any:
    result = undo(output)
    if inspect.isawaitable(result):  # an async compensation of an async workflow's step
        return asyncio.run(_awaited(result))
    return result


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _reschedule_unknown(store: EngineStore, claimed: ClaimedRun) -> tuple[Outcome, str, datetime | None]:
    """A rolling deploy: leave the run for a worker that has its name and version."""
    run = claimed.run
    previous = run.error or {}
    count = int(previous.get("reschedules", 0)) + 1 if previous.get("type") == "UnknownWorkflow" else 1
    delay = UNKNOWN_WORKFLOW_BACKOFF.delay_after(count)
    message = (
        f"this worker has no workflow {run.workflow_name!r} version {run.version!r}; "
        f"retrying in {delay.total_seconds():g}s"
    )
    logger.warning("run %s: %s", run.id, message)
    error = engine_error("UnknownWorkflow", message)
    error["reschedules"] = count
    now = claimed.claimed_at
    store.reschedule_run(Fence(run.id, claimed.worker_id, now), now + delay, error)
    return Outcome.UNKNOWN_WORKFLOW, message, now + delay
