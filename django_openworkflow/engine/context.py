"""What a workflow function sees (``ctx``, ``ctx.step``) and the replay state of one slice."""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from django.utils.dateparse import parse_datetime

from .. import hooks
from ..conf import owf_settings
from ..durations import Duration, parse_duration
from ..errors import (
    STEP_LIMIT_EXCEEDED,
    DeterminismError,
    NonRetryableError,
    PayloadError,
    RetryAfter,
    StepFailed,
    StepTimeout,
    StepUsageError,
)
from ..payload import check_text, storable_text, to_json_value
from ..states import FINISHED_STATUSES, RunStatus, StepKind, StepStatus
from ..store import get_backend
from ..store.journal import CancelRequested
from ..store.records import (
    AttemptRecord,
    AttemptUpdate,
    ChildStart,
    ClaimedRun,
    DeliveredSignal,
    EngineInterrupt,
    LeaseLapsed,
    LeaseLost,
    NewAttempt,
    Pending,
    RunOutcome,
)
from .attempt import StepAttemptInfo, current_attempt, in_attempt
from .retry import RetryPolicy
from .threads import Ended, run_on_threads

if TYPE_CHECKING:
    from ..registry import WorkflowSpec

T = TypeVar("T")

PARALLEL_THREADS = 16
"""Threads a parallel group runs at most at once, unless ``max_workers`` says otherwise."""
CHILD_WAIT = timedelta(days=365)
"""How long ``wait_all``/``wait_first`` park at most before looking again (a child's end wakes them)."""

current_step: contextvars.ContextVar[str | None] = contextvars.ContextVar("owf_current_step", default=None)
"""The step whose code runs in this context (async steps: ``in_step`` is per slice, this is per task)."""


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
    ) -> None:
        super().__init__(reason)
        self.written = written  # the park was already committed (signal and event waits)
        self.until = until
        self.reason = reason
        self.insert = insert
        self.start_child = start_child
        self.wake_when_child_done = wake_when_child_done
        self.wake_on_attempt = wake_on_attempt


STALE_NOTES = ("UnknownWorkflow", "EngineError")
"""Error types a run carries only until it executes again."""


@dataclass
class RunningStep:
    """The step whose code is running now, and its journal row once one is written."""

    key: str
    started_at: datetime
    started_monotonic: float
    attempt_id: int | None
    recorded_late: bool = False  # by the watchdog, while the step ran


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
    """The stored shape of an error: type, message, traceback (no local values), step."""
    kind = type(exc)
    try:
        message = str(exc)
        trace = "".join(traceback.format_exception(exc))
    except Exception as broken:  # a __str__ that raises must not take the engine down with it
        message = f"<{kind.__qualname__} whose str() raised {type(broken).__name__}>"
        trace = "".join(traceback.format_tb(exc.__traceback__))
    # Text from user code is stored whatever it holds: NULs and lone surrogates become escapes.
    error: dict[str, Any] = {
        "type": storable_text(
            kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        ),
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


def engine_error(kind: str, message: str, step: str | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"type": kind, "message": message}
    if step is not None:
        error["step"] = step
    return error


class History:
    """A run's journal indexed by durable key, loaded once per slice.

    Failures count toward a step's budget only within the current
    workflow-level attempt: a run retried by its workflow retry policy gives
    each failed step a fresh budget, while completed steps stay completed.
    """

    def __init__(self, attempts: list[AttemptRecord], run_attempt: int) -> None:
        self.run_attempt = run_attempt
        self.count = len(attempts)
        self.completed: dict[str, AttemptRecord] = {}
        self.open: dict[str, AttemptRecord] = {}
        self.kinds: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        self.failed_attempts: dict[str, int] = {}  # of every workflow attempt: numbers step attempts
        self.last_error: dict[str, dict[str, Any]] = {}
        for attempt in attempts:
            key = attempt.step_name
            self.kinds[key] = attempt.kind
            if attempt.status == StepStatus.COMPLETED:
                self.completed[key] = attempt
                self.open.pop(key, None)
            elif attempt.status == StepStatus.FAILED:
                self.open.pop(key, None)
                if (attempt.error or {}).get("run_attempt", 0) == run_attempt:
                    self.add_failure(key, attempt.error or {})
                else:
                    self.failed_attempts[key] = self.failed_attempts.get(key, 0) + 1
            else:
                self.open[key] = attempt

    def add_failure(self, key: str, error: dict[str, Any]) -> int:
        """Count a failure of ``key`` in this workflow attempt; returns the count."""
        self.failures[key] = self.failures.get(key, 0) + 1
        self.failed_attempts[key] = self.failed_attempts.get(key, 0) + 1
        self.last_error[key] = error
        return self.failures[key]


class Slice:
    """Replay state and pending journal writes for one execution slice of one run.

    Completions are buffered and committed with the next write (the next
    step's start, a park, or the run's end), so a step boundary costs one
    transaction.
    """

    def __init__(self, claimed: ClaimedRun, spec: WorkflowSpec, lease_valid: Callable[[], bool] | None = None) -> None:
        self.run = claimed.run
        self.store = get_backend()
        self.lease_valid = lease_valid
        self.spec = spec
        self.worker_id = claimed.worker_id
        self._claimed = claimed
        attempts = [] if claimed.fresh else self.store.load_history(self.run.id)
        self.history = History(attempts, self.run.attempts)
        self.pending: Pending = []
        # What the previous slice left to charge: its holder died mid-slice (the
        # lease expired), or it ended in an engine error. Replay is
        # deterministic, so the first new step this pass reaches is the one
        # that was running or whose result was lost (see ``starting_new_step``).
        self._charge: tuple[str | None, dict[str, Any]] | None = None
        if claimed.lease_expired:
            self._charge = (None, engine_error("LeaseExpired", "the worker running this step lost its lease"))
        note = self.run.error or {}
        if note.get("type") == "EngineError" and note.get("step"):
            self._charge = (note["step"], {key: note[key] for key in ("type", "message") if key in note})
        self.latest_new_step: str | None = None
        self.thread_id = threading.get_ident()
        self.active = True
        self.spawned = False  # started children or a successor (see SliceResult.spawned)
        self.cancel_requested = self.run.cancel_requested_at is not None
        # Set once a write or ctx.lease_held(check=True) found the run held by no one or another
        # worker; never cleared. Read by step code on any thread: a bool's store is atomic.
        self.lease_lost = False
        self.compensating = False
        self.in_step: str | None = None
        self._running: RunningStep | None = None
        self._step_lock = threading.Lock()
        self._used_keys: set[str] = set()
        self.compensations: list[tuple[str, Callable[[Any], Any], Any]] = []
        # async workflows: the tasks running steps, how many run, and the parks of those that ended in one
        self.async_tasks: set[Any] = set()
        self.steps_running = 0  # whose code runs now
        self.steps_called = 0  # called and not finished (their code may not have started yet)
        self.suspends: list[Suspend] = []
        self._next_index: dict[str, int] = {}
        self.max_attempts = owf_settings.max_step_attempts
        self._close_abandoned_attempts()
        if note.get("type") in STALE_NOTES:
            # A note about an earlier slice (no code for this version, an engine
            # error) is stale once the run executes again.
            self.store.clear_error(self.run.id, self.worker_id, self.now())

    def now(self) -> datetime:
        """The database clock, estimated from the claim's timestamp and elapsed time."""
        return self._claimed.clock()

    def _close_abandoned_attempts(self) -> None:
        # A `run` attempt still open was started by a worker that lost its lease
        # (crash, OOM, pause). It counts against the step's retry budget, so a
        # step that kills its worker every time cannot loop forever.
        now = self.now()
        for key, attempt in list(self.history.open.items()):
            if attempt.kind != StepKind.RUN:
                continue
            _, cause = self._charge or (
                None,
                engine_error("LeaseExpired", "the worker running this step lost its lease"),
            )
            self._charge = None
            self.pending.append(AttemptUpdate(attempt.id, StepStatus.FAILED, now, error=self._failure(key, cause)))
            del self.history.open[key]

    def _failure(self, key: str, cause: dict[str, Any]) -> dict[str, Any]:
        error = {**cause, "step": key, "run_attempt": self.run.attempts}
        self.history.add_failure(key, error)
        return error

    def starting_new_step(self, key: str, kind: str) -> None:
        """A step not in the journal is about to start: charge it what the previous slice left, if it runs code.

        A run being canceled starts nothing new but its compensations.
        """
        self.refuse_if_canceling()
        self.latest_new_step = key
        if self._charge is None:
            return
        (for_step, cause), self._charge = self._charge, None
        if kind == StepKind.RUN and for_step in (None, key):
            now = self.now()
            self.add_finished(
                NewAttempt(
                    key, kind, StepStatus.FAILED, started_at=now, finished_at=now, error=self._failure(key, cause)
                )
            )

    def refuse_if_canceling(self) -> None:
        """A run whose cancel was requested (seen at its claim or by the heartbeat) starts nothing new."""
        if self._claimed.cancel_requested:
            self.cancel_requested = True
        if self.cancel_requested and not self.compensating:
            raise CancelRun("the run is being canceled")

    def step_finished(
        self, key: str, status: str, started: datetime, finished: datetime, error: dict[str, Any] | None = None
    ) -> None:
        """Tell the ``step_finished`` hook's receivers."""
        seconds = (finished - started).total_seconds()
        # A failure is counted (History.add_failure) before this is sent, a completion is not.
        attempt = self.history.failures.get(key, 0) + (status != StepStatus.FAILED)
        hooks.send(
            hooks.step_finished,
            self.run.workflow_name,
            run_id=self.run.id,
            step=key,
            status=str(status),
            seconds=seconds,
            error=error,
            attempt=attempt,
        )

    # -- the step in progress (read by the watchdog's thread) --

    def begin_step(self, key: str, started: datetime, attempt_id: int | None, exclusive: bool = True) -> None:
        """A step's code starts; ``exclusive`` (sync code) refuses step calls until it ends."""
        if exclusive:
            self.in_step = key
        with self._step_lock:
            self._running = RunningStep(key, started, time.monotonic(), attempt_id)

    def has_running_step(self) -> bool:
        with self._step_lock:
            return self._running is not None

    def end_step(self) -> int | None:
        """The step's code returned or raised; returns its attempt id if its start was recorded."""
        self.in_step = None
        with self._step_lock:
            running, self._running = self._running, None
        if running is None:
            return None
        if running.recorded_late:
            self.history.count += 1
        return running.attempt_id

    def record_slow_step(self, older_than: float) -> bool:
        """From another thread: record the start of a step running longer than ``older_than`` seconds.

        The first step of a slice writes no start record, to keep a step
        boundary at one write; a step still running after a moment gets one,
        so the admin and the CLI show what the run is executing and since
        when. Its completion then updates that row.
        """
        with self._step_lock:
            running = self._running
            if running is None or running.attempt_id is not None:
                return False
            if time.monotonic() - running.started_monotonic < older_than:
                return False
            # Nothing is pending while a step runs whose start was not written,
            # so this write carries only the start (and stays fenced).
            attempt = NewAttempt(running.key, StepKind.RUN, StepStatus.RUNNING, started_at=running.started_at)
            running.attempt_id = self.store.record_step(self.run.id, self.worker_id, self.now(), [], attempt)
            running.recorded_late = True
            return True

    def attempt(self, key: str) -> StepAttemptInfo:
        """The attempt of step ``key`` about to run its code (numbered from the journal's failures)."""
        return StepAttemptInfo(self.run.id, key, self.history.failed_attempts.get(key, 0) + 1)

    def lease_held(self, check: bool = False) -> bool:
        """Whether this worker still holds the run: by its heartbeats, or (``check``) by asking the database."""
        if self.lease_lost:
            return False
        if check:
            if not self.store.holds_lease(self.run.id, self.worker_id):
                self.lease_lost = True  # never cleared: another thread's earlier "held" must not undo it
            return not self.lease_lost
        return self.lease_valid is None or self.lease_valid()

    def add_finished(self, change: AttemptUpdate | NewAttempt) -> None:
        """Buffer a finished attempt; it is committed with the next write."""
        self.pending.append(change)
        if isinstance(change, NewAttempt):
            self.history.count += 1

    def _journal(self, call: Callable[..., T], *args: Any, starts: bool = False, **options: Any) -> T:
        """Make one fenced journal write; the buffered attempt changes are committed with it.

        A write that ``starts`` something (a step, a park, a child, a
        successor, the run's end) asks, in its fence, whether the run's
        cancel was requested; unless the slice is compensating, such a
        write keeps only the completions it carries, and the workflow is
        left with :class:`CancelRun` to run the compensations. A heartbeat
        may never come during a short step: the write itself is the check.
        """
        if starts and not self.compensating:
            options["unless_canceling"] = True
        try:
            result = call(self.run.id, self.worker_id, self.now(), self.pending, *args, **options)
        except LeaseLost:
            self.lease_lost = True
            raise
        except CancelRequested:
            self.pending = []  # written, but for children that were to start with it
            self.cancel_requested = True
            raise CancelRun("the run is being canceled") from None
        self.pending = []
        return result

    def record_steps(self, attempts: list[NewAttempt]) -> list[int]:
        """Record that several steps started (after the buffered changes); returns their attempt ids."""
        ids = self._journal(self.store.record_steps, attempts, starts=True)
        self.history.count += len(attempts)
        return ids

    def flush(self) -> None:
        """Commit the buffered changes now (those that start children are refused once a cancel is requested)."""
        if self.pending:
            spawning = any(isinstance(change, NewAttempt) and change.child is not None for change in self.pending)
            self._journal(self.store.flush, starts=spawning)

    def step_timeout(self, timeout: Duration | None) -> float | None:
        """A step's timeout in seconds: its own, else the workflow's ``step_timeout``; None for none."""
        value = self.spec.step_timeout if timeout is None else timeout
        if value is None:
            return None
        try:
            seconds = parse_duration(value).total_seconds()
        except ValueError as exc:
            raise StepUsageError(f"step timeout: {exc}") from None
        if seconds <= 0:
            raise StepUsageError(f"step timeout must be positive, got {value!r}")
        return seconds

    def compensable(self, key: str, compensate: Callable[[Any], Any] | None, output: Any) -> None:
        """Remember how to undo a completed step, should the run fail for good."""
        if compensate is not None:
            self.compensations.append((key, compensate, output))

    def record_step(self, attempt: NewAttempt) -> int:
        """Record that a step started (after the buffered changes); returns its attempt id."""
        attempt_id = self._journal(self.store.record_step, attempt, starts=True)
        self.history.count += 1
        return attempt_id

    def park(self, suspend: Suspend) -> None:
        """Let go of the run until ``suspend.until``, recording the step that parks it."""
        self._journal(
            self.store.park,
            suspend.until,
            attempt=suspend.insert,
            child=suspend.start_child,
            wake_if_child_done=suspend.wake_when_child_done,
            wake_on_attempt=suspend.wake_on_attempt,
            starts=True,
        )
        if suspend.insert is not None:
            self.history.count += 1

    def complete(self, output: Any) -> None:
        """Finish the run with ``output`` (and wake a parent waiting on it)."""
        self._journal(self.store.complete_run, output, self.run.parent_step_attempt_id, starts=True)

    def cancel(self, error: dict[str, Any]) -> None:
        """End the run as canceled (its cancel was requested and its compensations ran)."""
        self._journal(self.store.cancel_held, error, self.run.parent_step_attempt_id)

    def fail(self, error: dict[str, Any], attempts: int | None = None) -> None:
        """Fail the run for good (and wake a parent waiting on it)."""
        self._journal(self.store.fail_run, error, self.run.parent_step_attempt_id, attempts)

    def reschedule(self, until: datetime, error: dict[str, Any], attempts: int) -> None:
        """Retry the whole workflow at ``until`` (a workflow-level retry)."""
        self._journal(self.store.reschedule_run, until, error, attempts, starts=True)

    def wait_for_delivery(self, **options: Any) -> DeliveredSignal | None:
        """Record or re-arm a signal/event wait and park (see ``JournalOps.wait_for_delivery``)."""
        attempt_id, signal = self._journal(self.store.wait_for_delivery, starts=True, **options)
        if attempt_id is not None:
            self.history.count += 1
        return signal

    def expire_wait(self, attempt_id: int) -> Any:
        """Journal a wait's timeout; returns a delivery that beat it, or None."""
        return self._journal(self.store.expire_wait, attempt_id=attempt_id)

    # -- checks shared by every step kind --

    def check_thread(self, api: str) -> None:
        """Refuse a step call from another thread (a step's own code, a parallel member) or after the slice."""
        if not self.active or threading.get_ident() != self.thread_id:
            raise StepUsageError(
                f"ctx.step.{api}() was called outside its workflow run's execution "
                "(from another thread, a parallel step's code, or after the run's slice ended)"
            )

    def enter_step_api(self, api: str, name: Any) -> str:
        """Validate a step call and return its durable key for this pass."""
        self.check_thread(api)
        running = self.in_step or current_step.get()
        if running is not None:
            raise StepUsageError(f"ctx.step.{api}({name!r}) was called inside step {running!r}; steps cannot be nested")
        if not isinstance(name, str) or not name.strip():
            raise StepUsageError(f"step name must be a non-empty string, got {name!r}")
        if len(name) > 240:
            raise StepUsageError(f"step name {name[:40]!r}... is {len(name)} characters long; the limit is 240")
        check_text(name, "step name")
        return self._resolve_key(name)

    def _resolve_key(self, name: str) -> str:
        # Auto-index collisions: name, name:1, name:2 ... skipping keys already
        # used in this pass (including ones the user typed).
        key = name
        if key in self._used_keys:
            index = self._next_index.get(name, 1)
            while f"{name}:{index}" in self._used_keys:
                index += 1
            key = f"{name}:{index}"
            self._next_index[name] = index + 1
        self._used_keys.add(key)
        return key

    def recorded(self, key: str, kind: str) -> AttemptRecord | None:
        """The completed attempt for ``key`` if any; fails the run if its kind differs."""
        recorded_kind = self.history.kinds.get(key)
        if recorded_kind is not None and recorded_kind != kind:
            message = (
                f"step {key!r} was recorded as {recorded_kind!r} but the workflow code now calls "
                f"{str(kind)!r} with that name: the code changed under a running workflow"
            )
            raise FailRun(error_from_exception(DeterminismError(message), step=key))
        return self.history.completed.get(key)

    def went_past_here(self) -> bool:
        """Whether the journal holds steps this pass has not reached yet (an earlier pass went further)."""
        return any(key not in self._used_keys for key in self.history.kinds)

    def continue_as_new(self, handover: ContinueAsNew) -> Any:
        """End the run as continued and start its successor; returns the successor's id."""
        spec = self.spec if handover.version == self.run.version else None
        from ..registry import registry

        spec = spec or registry.get(self.run.workflow_name, handover.version)
        assert spec is not None
        return self._journal(
            self.store.continue_as_new,
            input=handover.input,
            version=handover.version,
            flow=spec.flow_fields(handover.input),
            starts=True,
        )

    def check_can_start(self, key: str, until: datetime | None = None, more: int = 0) -> None:
        """Fail the run if another attempt (and ``more``) would pass the cap or the deadline.

        Without a lease the run is abandoned (:class:`LeaseLost`).
        """
        if self.lease_valid is not None and not self.lease_valid():
            raise LeaseLapsed(self.run.id)
        if self.history.count + more >= self.max_attempts:
            raise FailRun(
                engine_error(
                    STEP_LIMIT_EXCEEDED,
                    f"the run reached {self.max_attempts} step attempts "
                    "(OPENWORKFLOW['MAX_STEP_ATTEMPTS']); it is failed without retry",
                    step=key,
                )
            )
        self.check_deadline(until or self.now(), key)

    def park_limit(self, until: datetime) -> datetime:
        """Park no later than the deadline, so a run waiting past it wakes to fail."""
        deadline = self.run.deadline_at
        return until if deadline is None or until <= deadline else deadline

    def check_deadline(self, at: datetime, step: str | None = None) -> None:
        deadline = self.run.deadline_at
        if deadline is not None and at > deadline:
            raise FailRun(
                engine_error("DeadlineExceeded", f"the run's deadline {deadline.isoformat()} has passed", step)
            )


@dataclass
class Settled:
    """What became of a step whose code ended: its output, or its error and when it may be retried."""

    key: str
    output: Any = None
    error: dict[str, Any] | None = None
    retry_at: datetime | None = None  # None with an error: failed for good
    failures: int = 0


class ChildRun:
    """A child run started by ``ctx.step.start_workflow``: wait with ``wait_all``, ``wait_first`` or :meth:`result`.

    ``run_id`` is known once the start is written (at the run's next
    journal write, or when a wait needs it).
    """

    def __init__(
        self,
        api: StepApi,
        name: str,
        run_id: Any,
        *,
        done: bool = False,
        output: Any = None,
        error: dict[str, Any] | None = None,
        attempt_id: int | None = None,
        new: NewAttempt | None = None,
    ) -> None:
        self._api = api
        self.name = name  # the step's durable key
        self._run_id = run_id
        self._attempt_id = attempt_id
        self.new = new
        self.done = done
        self.output = output
        self.error = error
        self.finished_at: datetime | None = None
        self.outcome: RunOutcome | None = None

    def __repr__(self) -> str:
        state = "failed" if self.error is not None else "done" if self.done else "running"
        return f"<ChildRun {self.name!r} {self.run_id} {state}>"

    @property
    def run_id(self) -> Any:
        """The child run's id (None until its start is written); after a continue-as-new, its successor's."""
        return self.new.child_run_id if self.new is not None else self._run_id

    def follow(self, run_id: Any, outcome: RunOutcome | None) -> None:
        """The child continued as new: it is now ``run_id``."""
        if self.new is not None:
            self._attempt_id, self.new = self.new.id, None
        self._run_id, self.outcome = run_id, outcome

    @property
    def attempt_id(self) -> int:
        attempt_id = self.new.id if self.new is not None else self._attempt_id
        assert attempt_id is not None, "the child's start is written before it is waited for"
        return attempt_id

    def result(self) -> Any:
        """Wait durably for this child and return its output (``ctx.step.wait_all([child])[0]``)."""
        return self._api.wait_all([self])[0]


def _child_spec(workflow: Any, api: str) -> WorkflowSpec:
    from ..registry import WorkflowSpec, registry

    if isinstance(workflow, WorkflowSpec):
        return workflow
    if isinstance(workflow, str):
        return registry.latest(workflow)
    raise StepUsageError(f"ctx.step.{api}() needs a workflow or a workflow name, got {workflow!r}")


class StepApi:
    """``ctx.step``: the durable primitives a workflow function calls."""

    def __init__(self, slice_: Slice) -> None:
        self._slice = slice_

    def run(
        self,
        name: str,
        fn: Callable[[], T],
        *,
        retry_policy: RetryPolicy | None = None,
        atomic: bool = False,
        timeout: Duration | None = None,
        compensate: Callable[[Any], Any] | None = None,
    ) -> T:
        """Run ``fn()`` once and memoize its JSON result under ``name``.

        On replay a completed step returns its stored output without calling
        ``fn``. A failure is retried by ``retry_policy`` (default: the
        workflow's ``step_retry_policy``); when retries are spent the step
        raises :class:`StepFailed` here.

        ``timeout`` (default: the workflow's ``step_timeout``) fails an
        attempt that runs longer with :class:`StepTimeout`, which counts
        toward the retry budget; the code then runs on a thread of its own,
        which is abandoned (not stopped) when it overruns.

        ``compensate(output)`` undoes the step: if the run later fails for
        good, the compensations of its completed steps run in reverse order,
        each as a durable step named ``compensate:<name>``.

        With ``atomic=True``, ``fn`` runs inside the database transaction that
        records its completion: its writes to the workflow database commit
        together with the journal entry or not at all, so they happen exactly
        once even if the worker is killed at any point. Writes to another
        database alias inside such a step are refused.
        """
        s = self._slice
        key = s.enter_step_api("run", name)
        done = self._prepare(key, fn, retry_policy, compensate)
        if done is not None:
            return cast(T, done.output)
        fn = in_attempt(s.attempt(key), fn)
        policy = retry_policy or s.spec.step_retry_policy
        limit = s.step_timeout(timeout)
        if atomic and limit is not None:
            raise StepUsageError(
                f"ctx.step.run({name!r}): an atomic step cannot have a timeout (its transaction would commit "
                "after the timeout gave up on it); set a statement timeout on the database instead"
            )
        s.check_can_start(key)
        started = s.now()
        if atomic:
            stored = self._run_atomic(key, fn, policy)
            s.compensable(key, compensate, stored)
            return cast(T, stored)
        attempt_id = None
        if s.pending:
            # The writes buffered so far must be durable before this step's side
            # effects start; recording the start rides along in that commit. The
            # first step of a slice writes nothing up front: if its worker dies,
            # the next claim charges the crash to it (see Slice.starting_new_step).
            attempt_id = s.record_step(NewAttempt(key, StepKind.RUN, StepStatus.RUNNING, started_at=started))
        s.begin_step(key, started, attempt_id)
        if limit is None:
            try:
                ended = Ended(0, fn())
            except EngineInterrupt:
                s.end_step()
                raise
            except BaseException as exc:  # user code: any Exception, and SystemExit, KeyboardInterrupt ...
                ended = Ended(0, error=exc)
        else:
            (ended,) = next(run_on_threads([(fn, limit)], 1, s.store.close_thread_connections, f"owf-{key}"))
        attempt_id = s.end_step()
        return cast(T, self.conclude(key, attempt_id, started, policy, ended, limit, compensate))

    def conclude(
        self,
        key: str,
        attempt_id: int | None,
        started: datetime,
        policy: RetryPolicy,
        ended: Ended,
        limit: float | None,
        compensate: Callable[[Any], Any] | None,
        flush_now: bool = False,
    ) -> Any:
        """The end of a ``run`` step: journal how its code ended, then return its output or leave for its failure.

        ``flush_now`` commits the journal at once (other steps still run: a
        crash must not take this one's result with it).
        """
        settled = self.settle(key, attempt_id, started, policy, ended, limit)
        if flush_now:
            self._slice.flush()
        if settled.error is not None:
            self.unwind(settled)
        self._slice.compensable(key, compensate, settled.output)
        return settled.output

    def _prepare(self, key: str, fn: Any, retry_policy: RetryPolicy | None, compensate: Any) -> AttemptRecord | None:
        """The checks before a ``run`` step's code: its journal entry if it completed, else None.

        Raises :class:`StepFailed` when an earlier slice spent its retries.
        """
        s = self._slice
        done = s.recorded(key, StepKind.RUN)
        if done is not None:
            s.compensable(key, compensate, done.output)
            return done
        if not callable(fn):
            raise StepUsageError(f"step {key!r}: fn must be callable, got {fn!r}")
        if compensate is not None and not callable(compensate):
            raise StepUsageError(f"step {key!r}: compensate must be callable, got {compensate!r}")
        policy = retry_policy or s.spec.step_retry_policy
        s.starting_new_step(key, StepKind.RUN)
        failures = s.history.failures.get(key, 0)
        last_error = s.history.last_error.get(key)
        if last_error is not None and (not last_error.get("retryable", True) or not policy.allows_another(failures)):
            raise StepFailed(key, last_error)
        return None

    def settle(
        self,
        key: str,
        attempt_id: int | None,
        started: datetime,
        policy: RetryPolicy,
        ended: Ended,
        limit: float | None = None,
    ) -> Settled:
        """Journal how a step's code ended (buffered) and decide what follows: its output, a retry, or failure."""
        s = self._slice
        if ended.timed_out:
            error = error_from_exception(
                StepTimeout(
                    f"step {key!r} ran longer than its timeout of {limit:g}s; its code was abandoned "
                    "and may still be running"
                ),
                step=key,
            )
            return self._failed(key, attempt_id, started, error, True, policy)
        if ended.error is not None:
            retryable, delay = retry_decision(ended.error)
            error = error_from_exception(ended.error, step=key)
            return self._failed(key, attempt_id, started, error, retryable, policy, delay)
        try:
            stored = to_json_value(ended.value, f"output of step {key!r}", "output")
        except PayloadError as exc:
            return self._failed(key, attempt_id, started, error_from_exception(exc, step=key), False, policy)
        now = s.now()
        if attempt_id is None:
            s.add_finished(
                NewAttempt(key, StepKind.RUN, StepStatus.COMPLETED, started_at=started, finished_at=now, output=stored)
            )
        else:
            s.add_finished(AttemptUpdate(attempt_id, StepStatus.COMPLETED, now, output=stored))
        s.step_finished(key, StepStatus.COMPLETED, started, now)
        return Settled(key, stored)

    def unwind(self, settled: Settled) -> NoReturn:
        """Leave the workflow function for a failed step: park until its retry, or raise :class:`StepFailed`."""
        assert settled.error is not None
        if settled.retry_at is not None:
            self._slice.check_deadline(settled.retry_at, settled.key)
            raise Suspend(settled.retry_at, f"retry step {settled.key!r} after failure {settled.failures}")
        raise StepFailed(settled.key, settled.error)

    def _run_atomic(self, key: str, fn: Callable[[], Any], policy: RetryPolicy) -> Any:
        s = self._slice
        started = s.now()
        s.in_step = key
        try:
            # The journal's own write or the commit failing raises StoreUnavailable, which passes through.
            with s.store.atomic_step(s.run.id, s.worker_id, s.now, s.pending) as record:
                stored = to_json_value(fn(), f"output of step {key!r}", "output")
                record(NewAttempt(key, StepKind.RUN, StepStatus.COMPLETED, started, output=stored, finished_at=s.now()))
        except EngineInterrupt:
            raise
        except BaseException as exc:  # user code, as in run()
            # Rolled back: neither fn's writes nor the journal entry happened.
            s.in_step = None
            retryable, delay = retry_decision(exc)
            # Here the output's encoding failed inside the transaction too: no retry fixes that.
            retryable = retryable and not isinstance(exc, PayloadError)
            self.unwind(self._failed(key, None, started, error_from_exception(exc, step=key), retryable, policy, delay))
        finally:
            s.in_step = None
        s.pending = []
        s.history.count += 1
        s.step_finished(key, StepStatus.COMPLETED, started, s.now())
        return stored

    def _failed(
        self,
        key: str,
        attempt_id: int | None,
        started: datetime,
        error: dict[str, Any],
        retryable: bool,
        policy: RetryPolicy,
        delay: timedelta | None = None,
    ) -> Settled:
        s = self._slice
        now = s.now()
        error["run_attempt"] = s.run.attempts
        if not retryable:
            error["retryable"] = False
        if attempt_id is None:
            s.add_finished(
                NewAttempt(key, StepKind.RUN, StepStatus.FAILED, started_at=started, finished_at=now, error=error)
            )
        else:
            s.add_finished(AttemptUpdate(attempt_id, StepStatus.FAILED, now, error=error))
        failures = s.history.add_failure(key, error)
        s.step_finished(key, StepStatus.FAILED, started, now, error)
        retry_at = None
        if retryable and policy.allows_another(failures):
            retry_at = now + (policy.delay_after(failures) if delay is None else delay)
        return Settled(key, error=error, retry_at=retry_at, failures=failures)

    def parallel(
        self,
        calls: Iterable[tuple[str, Callable[[], Any]]],
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: Duration | None = None,
        max_workers: int | None = None,
    ) -> list[Any]:
        """Run several steps at once, each on a thread of its own, and return their outputs in call order.

        ``calls`` is a list of ``(name, fn)`` pairs; each is a durable step
        like :meth:`run`, journaled as it finishes, so a crash re-runs only
        the ones that had not finished. A step's code that touches the
        database uses its thread's own connection. When one fails for good
        the others still finish (and keep their results) and
        :class:`StepFailed` is raised for the first of them in call order;
        when one may be retried, the run parks until its retry and the
        group is replayed with the finished ones remembered.
        ``max_workers`` caps the threads (default: :data:`PARALLEL_THREADS`).
        """
        s = self._slice
        pairs = list(calls)
        for pair in pairs:
            if not (isinstance(pair, tuple | list) and len(pair) == 2):
                raise StepUsageError(f"ctx.step.parallel() takes (name, fn) pairs, got {pair!r:.80}")
        if max_workers is not None and (type(max_workers) is not int or max_workers < 1):
            raise StepUsageError(f"max_workers must be a positive integer, got {max_workers!r}")
        policy = retry_policy or s.spec.step_retry_policy
        limit = s.step_timeout(timeout)
        keys = [s.enter_step_api("parallel", name) for name, _ in pairs]
        results: list[Any] = [None] * len(pairs)
        todo: list[int] = []
        for index, (key, (_, fn)) in enumerate(zip(keys, pairs, strict=True)):
            done = self._prepare(key, fn, retry_policy, None)
            if done is not None:
                results[index] = done.output
            else:
                todo.append(index)
        if not todo:
            return results
        s.check_can_start(keys[todo[0]], more=len(todo) - 1)
        started = s.now()
        ids = s.record_steps([NewAttempt(keys[i], StepKind.RUN, StepStatus.RUNNING, started_at=started) for i in todo])
        settled: dict[int, Settled] = {}
        workers = min(len(todo), max_workers or PARALLEL_THREADS)
        calls_ = [(in_attempt(s.attempt(keys[i]), pairs[i][1]), limit) for i in todo]
        for batch in run_on_threads(calls_, workers, s.store.close_thread_connections, "owf-parallel"):
            for ended in batch:
                index = todo[ended.index]
                settled[index] = self.settle(keys[index], ids[ended.index], started, policy, ended, limit)
                results[index] = settled[index].output
            if len(settled) < len(todo):
                s.flush()  # durable now: a crash re-runs only the members still running
        failed = [settled[i] for i in todo if settled[i].error is not None]
        terminal = [f for f in failed if f.retry_at is None]
        if terminal or failed:
            self.unwind(terminal[0] if terminal else min(failed, key=lambda f: cast(datetime, f.retry_at)))
        return results

    def map(
        self,
        name: str,
        fn: Callable[[Any], Any],
        items: Iterable[Any],
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: Duration | None = None,
        max_workers: int | None = None,
    ) -> list[Any]:
        """``fn(item)`` for each item, in parallel, as steps ``name[0]``, ``name[1]``... (see :meth:`parallel`)."""
        if not callable(fn):
            raise StepUsageError(f"ctx.step.map({name!r}, fn, items): fn must be callable, got {fn!r}")
        calls = [(f"{name}[{i}]", functools.partial(fn, item)) for i, item in enumerate(items)]
        return self.parallel(calls, retry_policy=retry_policy, timeout=timeout, max_workers=max_workers)

    def sleep(self, name: str, duration: Duration) -> None:
        """Pause the run durably for ``duration``; the worker slot is freed meanwhile."""
        s = self._slice
        delay = parse_duration(duration)
        key = s.enter_step_api("sleep", name)
        if s.recorded(key, StepKind.SLEEP) is not None:
            return
        now = s.now()
        waiting = s.history.open.get(key)
        if waiting is not None:
            resume_at = parse_datetime((waiting.context or {})["resume_at"])
            assert resume_at is not None
            if now >= resume_at:
                s.add_finished(AttemptUpdate(waiting.id, StepStatus.COMPLETED, now))
                return
            raise Suspend(resume_at, f"sleep {key!r}")
        s.starting_new_step(key, StepKind.SLEEP)
        resume_at = now + delay
        s.check_can_start(key, resume_at)
        insert = NewAttempt(
            key, StepKind.SLEEP, StepStatus.RUNNING, started_at=now, context={"resume_at": resume_at.isoformat()}
        )
        raise Suspend(resume_at, f"sleep {key!r}", insert=insert)

    def run_workflow(
        self,
        workflow: WorkflowSpec | str,
        input: Any = None,
        *,
        name: str | None = None,
        timeout: Duration = "1y",
    ) -> Any:
        """Start a child workflow exactly once and wait for it durably; return its output.

        The parent is parked (no worker slot held) and woken as soon as the
        child finishes. A failed or canceled child raises :class:`StepFailed`
        carrying the child's error; so does ``timeout``, after which the child
        keeps running on its own. ``name`` (the durable key) defaults to the
        child workflow's name; a string picks the highest registered version.
        """
        s = self._slice
        spec = _child_spec(workflow, "run_workflow")
        wait = parse_duration(timeout)
        key = s.enter_step_api("run_workflow", spec.name if name is None else name)
        done = s.recorded(key, StepKind.WORKFLOW)
        if done is not None:
            return done.output
        last_error = s.history.last_error.get(key)
        if last_error is not None:
            raise StepFailed(key, last_error)
        now = s.now()
        waiting = s.history.open.get(key)
        if waiting is None:
            s.starting_new_step(key, StepKind.WORKFLOW)
            start = self._child_start(spec, input, key)
            s.check_can_start(key)
            timeout_at = now + wait
            insert = NewAttempt(
                key,
                StepKind.WORKFLOW,
                StepStatus.RUNNING,
                started_at=now,
                context={"timeout_at": timeout_at.isoformat(), "workflow": spec.name, "version": spec.version},
            )
            raise Suspend(s.park_limit(timeout_at), f"wait for child {key!r}", insert=insert, start_child=start)
        child_id, outcome = self._current_child(waiting.child_workflow_run_id)
        if outcome is not None and outcome.status not in FINISHED_STATUSES:
            wait_until = parse_datetime((waiting.context or {})["timeout_at"])
            assert wait_until is not None
            if now < wait_until:
                s.check_deadline(now, key)
                raise Suspend(s.park_limit(wait_until), f"wait for child {key!r}", wake_when_child_done=[child_id])
            error = engine_error("ChildWorkflowTimeout", f"child run {child_id} did not finish within {wait}", key)
            error.update(child_run_id=str(child_id), run_attempt=s.run.attempts, retryable=False)
            s.add_finished(AttemptUpdate(waiting.id, StepStatus.FAILED, now, error=error))
            s.history.add_failure(key, error)
            raise StepFailed(key, error)
        child = self._child_finished(key, waiting.id, child_id, outcome)
        if child.error is not None:
            raise StepFailed(key, child.error)
        return child.output

    def _current_child(self, child_id: Any, outcome: RunOutcome | None = None) -> tuple[Any, RunOutcome | None]:
        """The run that stands for a child now, and its outcome: a child that continued as new is its successor."""
        store = self._slice.store
        if child_id is not None and outcome is None:
            outcome = store.run_outcome(child_id)
        while outcome is not None and outcome.status == RunStatus.CONTINUED:
            successor = store.successor_id(child_id)
            if successor is None:  # pragma: no cover - written in one transaction with the handover
                break
            child_id, outcome = successor, store.run_outcome(successor)
        return child_id, outcome

    def _child_start(self, spec: WorkflowSpec, input: Any, key: str) -> ChildStart:
        child_input = to_json_value(input, f"input of child workflow {spec.name!r} (step {key!r})", "input")
        return ChildStart(spec.name, spec.version, child_input, spec.flow_fields(child_input))

    def _child_finished(self, key: str, attempt_id: int, child_id: Any, outcome: RunOutcome | None) -> ChildRun:
        """Journal (buffered) that the child of step ``key`` ended: its output, or its failure as the step's."""
        s = self._slice
        now = s.now()
        if outcome is not None and outcome.status == RunStatus.COMPLETED:
            s.add_finished(AttemptUpdate(attempt_id, StepStatus.COMPLETED, now, output=outcome.output))
            return ChildRun(self, key, child_id, done=True, output=outcome.output)
        if outcome is None:
            error = engine_error("ChildWorkflowMissing", f"the child run of step {key!r} no longer exists", key)
        else:
            error = engine_error("ChildWorkflowFailed", f"child run {child_id} {outcome.status}", key)
            # The child's own error, without the errors of its children: a chain of
            # failed descendants would otherwise nest one level deeper per generation
            # (each run's error links its child by child_run_id).
            error["child_error"] = {k: v for k, v in (outcome.error or {}).items() if k != "child_error"}
        error.update(child_run_id=str(child_id), run_attempt=s.run.attempts, retryable=False)
        s.add_finished(AttemptUpdate(attempt_id, StepStatus.FAILED, now, error=error))
        s.history.add_failure(key, error)
        return ChildRun(self, key, child_id, done=True, error=error)

    def start_workflow(self, workflow: WorkflowSpec | str, input: Any = None, *, name: str | None = None) -> ChildRun:
        """Start a child workflow exactly once without waiting for it; returns a :class:`ChildRun`.

        Start as many as you like, then wait for them with :meth:`wait_all`
        or :meth:`wait_first` (or ``child.result()``). The starts are
        written together with the run's next journal write, each as a step
        of its own (``name`` defaults to the workflow's name, numbered on
        repeats: ``resize``, ``resize:1``...).
        """
        s = self._slice
        spec = _child_spec(workflow, "start_workflow")
        key = s.enter_step_api("start_workflow", spec.name if name is None else name)
        done = s.recorded(key, StepKind.WORKFLOW)
        if done is not None:
            return ChildRun(self, key, done.child_workflow_run_id, done=True, output=done.output)
        waiting = s.history.open.get(key)
        if waiting is not None:
            return ChildRun(self, key, waiting.child_workflow_run_id, attempt_id=waiting.id)
        last_error = s.history.last_error.get(key)
        if last_error is not None:
            return ChildRun(self, key, None, done=True, error=last_error)
        s.starting_new_step(key, StepKind.WORKFLOW)
        start = self._child_start(spec, input, key)
        s.check_can_start(key)
        context = {"workflow": spec.name, "version": spec.version}
        new = NewAttempt(key, StepKind.WORKFLOW, StepStatus.RUNNING, started_at=s.now(), context=context, child=start)
        s.add_finished(new)
        s.spawned = True
        return ChildRun(self, key, None, new=new)

    def wait_all(self, children: Sequence[ChildRun]) -> list[Any]:
        """Wait durably until every child finished; their outputs in the order given.

        The run parks meanwhile (no worker slot held). The first child to
        fail (or be canceled) raises :class:`StepFailed` at once, carrying
        its error; the others keep running.
        """
        s = self._slice
        self._refresh(children, "wait_all")
        for child in children:
            if child.error is not None:
                raise StepFailed(child.name, child.error)
        unfinished = [child for child in children if not child.done]
        if not unfinished:
            return [child.output for child in children]
        # Woken early by the first of them only (or by any that fails); due at once if
        # one ended since they were read, so no end that raced this park is missed.
        raise Suspend(
            s.park_limit(s.now() + CHILD_WAIT),
            f"wait for {len(unfinished)} of {len(children)} children",
            wake_when_child_done=[child.run_id for child in unfinished],
            wake_on_attempt=unfinished[0].attempt_id,
        )

    def wait_first(self, children: Sequence[ChildRun], *, name: str = "wait_first") -> tuple[int, Any]:
        """Wait durably until one of the children finished; returns its index and output.

        Which one came first is journaled under ``name``, so a replay returns
        the same. If that child failed, :class:`StepFailed` is raised.
        """
        s = self._slice
        if not children:
            raise StepUsageError("ctx.step.wait_first() needs at least one child")
        key = s.enter_step_api("wait_first", name)
        done = s.recorded(key, StepKind.RUN)
        if done is None:
            # A wait: a crash of the previous slice is not charged to it (it runs no code).
            s.starting_new_step(key, StepKind.WORKFLOW)
        self._refresh(children, "wait_first")
        if done is not None:
            index = int(done.output["index"])
        else:
            ended = [i for i, child in enumerate(children) if child.done]
            if not ended:
                raise Suspend(
                    s.park_limit(s.now() + CHILD_WAIT),
                    f"wait for the first of {len(children)} children",
                    wake_when_child_done=[child.run_id for child in children],
                )
            index = min(ended, key=lambda i: children[i].finished_at or s.now())
            s.check_can_start(key)
            now = s.now()
            output = {"index": index, "run_id": str(children[index].run_id)}
            s.add_finished(NewAttempt(key, StepKind.RUN, StepStatus.COMPLETED, now, output=output, finished_at=now))
        winner = children[index]
        if winner.error is not None:
            raise StepFailed(winner.name, winner.error)
        return index, winner.output

    def _refresh(self, children: Sequence[ChildRun], api: str) -> None:
        """Read the state of the children not known to have finished, in one query, and journal those that did."""
        s = self._slice
        s.check_thread(api)
        for child in children:
            if not isinstance(child, ChildRun):
                raise StepUsageError(
                    f"ctx.step.{api}() takes children from ctx.step.start_workflow(), got {child!r:.80}"
                )
        if any(child.new is not None and child.new.id is None for child in children):
            s.flush()  # the starts are written: the children exist and have ids
        open_children = [child for child in children if not child.done]
        if not open_children:
            return
        outcomes = s.store.run_outcomes([child.run_id for child in open_children])
        for child in open_children:
            outcome = outcomes.get(child.run_id)
            if outcome is not None and outcome.status == RunStatus.CONTINUED:
                child.follow(*self._current_child(child.run_id, outcome))
                outcome = child.outcome
            if outcome is not None and outcome.status not in FINISHED_STATUSES:
                continue
            ended = self._child_finished(child.name, child.attempt_id, child.run_id, outcome)
            child.done, child.output, child.error = True, ended.output, ended.error
            child.finished_at = outcome.finished_at if outcome is not None else None

    def wait_for_signal(self, name: str, *, timeout: Duration = "7d") -> Any:
        """Park until a signal called ``name`` is sent to this run; return its data.

        Signals sent before the run reaches the wait are buffered and taken in
        order (FIFO per name). Returns ``None`` on timeout; the timeout is
        journaled, so a replay returns ``None`` again and a late signal stays
        buffered for the next wait.
        """
        if not isinstance(name, str) or not name:
            raise StepUsageError(f"signal name must be a non-empty string, got {name!r}")
        output = self._wait(StepKind.SIGNAL, "wait_for_signal", name, timeout, {"signal": name}, signal_name=name)
        return None if output is None else output.get("data")

    def wait_for_event(
        self, name: str, *, event: str, match: dict[str, Any] | None = None, timeout: Duration = "7d"
    ) -> Any:
        """Park until an event of type ``event`` whose payload contains ``match`` is sent; return the payload.

        Containment is JSON containment (PostgreSQL's ``@>``): every key of
        ``match`` is in the payload with a value that contains the pattern's.
        Only events sent after the run started waiting count. ``None`` on
        timeout, journaled like a signal's.
        """
        if not isinstance(event, str) or not event:
            raise StepUsageError(f"event type must be a non-empty string, got {event!r}")
        check_text(event, "event type")
        pattern = to_json_value(match or {}, f"match of event wait {name!r}", "match")
        if not isinstance(pattern, dict):
            raise StepUsageError(f"match must be a dict, got {match!r}")
        context = {"event": event, "match": pattern}
        output = self._wait(StepKind.EVENT, "wait_for_event", name, timeout, context, event_type=event)
        return None if output is None else output.get("payload")

    def _wait(
        self,
        kind: str,
        api: str,
        name: str,
        timeout: Duration,
        context: dict[str, Any],
        signal_name: str | None = None,
        event_type: str | None = None,
    ) -> dict[str, Any] | None:
        """The shared wait: returns the delivered output dict, or None on timeout; parks otherwise."""
        s = self._slice
        wait = parse_duration(timeout)
        key = s.enter_step_api(api, name)
        done = s.recorded(key, kind)
        if done is not None:
            return None if (done.output or {}).get("timed_out") else done.output
        now = s.now()
        waiting = s.history.open.get(key)
        if waiting is None:
            s.starting_new_step(key, kind)
            s.check_can_start(key)
            timeout_at = now + wait
            insert = NewAttempt(
                key, kind, StepStatus.RUNNING, started_at=now, context={**context, "timeout_at": timeout_at.isoformat()}
            )
            until = s.park_limit(timeout_at)
            signal = s.wait_for_delivery(
                insert=insert, park_until=until, signal_name=signal_name, event_type=event_type
            )
            if signal is not None:
                return {"signal_id": signal.id, "data": signal.data}
            raise Suspend(until, f"{api} {key!r}", written=True)
        expires_at = parse_datetime((waiting.context or {})["timeout_at"])
        assert expires_at is not None
        if now >= expires_at:
            delivered: dict[str, Any] | None = s.expire_wait(waiting.id)
            return delivered
        s.check_deadline(now, key)
        s.refuse_if_canceling()  # before the park is written: a canceling run compensates instead
        until = s.park_limit(expires_at)
        s.wait_for_delivery(waiting_attempt_id=waiting.id, park_until=until)
        raise Suspend(until, f"{api} {key!r}", written=True)


class WorkflowContext:
    """The one argument of a workflow function.

    ``input`` is the run's input, ``step`` the durable step API, ``version``
    the version the run started with, ``run_id`` the run's id.
    """

    def __init__(self, slice_: Slice) -> None:
        self._slice = slice_
        self.input: Any = slice_.run.input
        self.version: str | None = slice_.run.version
        self.run_id = slice_.run.id
        self.workflow_name: str = slice_.run.workflow_name
        self.step = StepApi(slice_)

    def is_canceled(self) -> bool:
        """True once the run has been canceled (for long steps to check cooperatively)."""
        return self._slice.store.is_canceled(self.run_id)

    def lease_held(self, check: bool = False) -> bool:
        """Whether this worker still holds the run's lease; call it between a step's side effects.

        A lease bounds which worker may *write* the run, not code already
        running: a worker frozen past its lease (a long GC pause, SIGSTOP, a
        VM migration) resumes inside its step while another worker runs the
        run. Without ``check`` the answer is local and free: False once this
        worker could not renew the lease for most of its length, or once a
        write or a check found the run taken from it; it does not see a
        takeover by itself. ``check=True`` asks the database (one query):
        held by this worker, its lease not run out. A database error is
        raised as it is.
        Either can turn False right after it said True: make the side effect
        idempotent as well (:meth:`attempt`).
        """
        return self._slice.lease_held(check)

    def attempt(self) -> StepAttemptInfo:
        """The attempt of the step whose code calls this: its ``id`` and ``idempotency_key``.

        ``ctx.attempt().idempotency_key`` is the same for every attempt of
        the step: pass it to an API that deduplicates, so a step that runs
        twice has its effect once. Raises :class:`StepUsageError` outside a
        step's code.
        """
        return current_attempt()

    def patched(self, name: str) -> bool:
        """Whether this run takes the new branch of a code change called ``name``.

        ``if ctx.patched("tax-v2"): new code; else: old code``. A run that
        reaches this point for the first time takes the new branch, and the
        choice is journaled; a run that went past this point before the
        patch was deployed (its journal has steps beyond it) keeps the old
        branch, so its replay still matches its journal. Once no run
        started before the patch is in flight, delete the old branch and
        the call.
        """
        s = self._slice
        key = s.enter_step_api("patched", f"patch:{name}")
        if s.recorded(key, StepKind.PATCH) is not None:
            return True
        if s.went_past_here():
            return False
        now = s.now()
        s.add_finished(NewAttempt(key, StepKind.PATCH, StepStatus.COMPLETED, started_at=now, finished_at=now))
        return True

    def continue_as_new(self, input: Any = None, *, version: str | None = None) -> NoReturn:
        """End this run and start a fresh one of the same workflow with ``input`` (an empty journal).

        For pollers and long loops, which would otherwise reach the step
        limit: the run ends as ``continued`` and its successor, linked by
        ``continued_from``, carries on; its result is the result of the
        chain (``handle.result()`` follows it). ``version`` defaults to this
        run's. Does not return.
        """
        from ..registry import registry

        s = self._slice
        s.check_thread("continue_as_new")
        if s.in_step is not None or current_step.get() is not None:
            raise StepUsageError("ctx.continue_as_new() was called inside a step")
        target = s.run.version if version is None else version
        if registry.get(s.run.workflow_name, target) is None:
            raise StepUsageError(
                f"ctx.continue_as_new(): workflow {s.run.workflow_name!r} has no version {target!r} in this process"
            )
        value = to_json_value(input, f"input of the run continuing {s.run.workflow_name!r}", "input")
        raise ContinueAsNew(value, target)
