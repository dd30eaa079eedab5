"""The replay state of one slice of one run: its history, its write buffer, its journal writes and checks."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from .. import hooks
from ..conf import owf_settings
from ..definitions.payload import check_text
from ..durations import Duration, parse_duration
from ..errors import STEP_LIMIT_EXCEEDED, DeterminismError, StepUsageError
from ..states import StepKind, StepStatus
from ..store.records import (
    AttemptRecord,
    AttemptUpdate,
    CancelRequested,
    ClaimedRun,
    DeliveredSignal,
    Fence,
    LeaseLapsed,
    LeaseLost,
    NewAttempt,
    Pending,
)
from .attempt import StepAttemptInfo
from .history import History
from .interrupts import CancelRun, ContinueAsNew, FailRun, Suspend, engine_error, error_from_exception
from .running_step import RunningStep, RunningStepTracking

if TYPE_CHECKING:
    from ..definitions.registry import WorkflowSpec
    from ..store.interface import EngineStore

T = TypeVar("T")

current_step: contextvars.ContextVar[str | None] = contextvars.ContextVar("owf_current_step", default=None)
"""The step whose code runs in this context (async steps: ``in_step`` is per slice, this is per task)."""

STALE_NOTES = ("UnknownWorkflow", "EngineError")
"""Error types a run carries only until it executes again."""


class Slice(RunningStepTracking):
    """Replay state and pending journal writes for one execution slice of one run.

    Completions are buffered and committed with the next write (the next
    step's start, a park, or the run's end), so a step boundary costs one
    transaction.
    """

    def __init__(
        self,
        store: EngineStore,
        claimed: ClaimedRun,
        spec: WorkflowSpec,
        lease_valid: Callable[[], bool] | None = None,
    ) -> None:
        self.run = claimed.run
        self.store = store  # the backend of the worker that claimed the run
        self.lease_valid = lease_valid
        self.spec = spec
        self.worker_id = claimed.worker_id
        self._claimed = claimed
        # A run never claimed has an empty journal, but for the rows a re-run from a step copied.
        fresh = claimed.fresh and self.run.rerun_from_step is None
        attempts = [] if fresh else self.store.load_history(self.run.id)
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
        self.spawned = self.backing_off = False  # started children/a successor; parked for a step's retry
        self.cancel_requested = self.run.cancel_requested_at is not None
        # Set once a write or ctx.lease_held(check=True) found the run held by no one or another
        # worker; never cleared. Read by step code on any thread: a bool's store is atomic.
        self.lease_lost = False
        self.compensating = False
        self.alerting = False  # while the run's on_failure step runs (see check_can_start)
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
        if note.get("type") in STALE_NOTES or "retry" in note:
            # A note about an earlier slice (no code for this version, an engine
            # error, the failure a retry waited after) is stale once the run executes again.
            self.store.clear_error(Fence(self.run.id, self.worker_id, self.now()))

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
            lost = engine_error("LeaseExpired", "the worker running this step lost its lease")
            _, cause = self._charge or (None, lost)
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

    def fence(self, unless_canceling: bool = False) -> Fence:
        """The fence of a write made now: this worker holding the run, the buffered changes committed first."""
        return Fence(self.run.id, self.worker_id, self.now(), self.pending, unless_canceling)

    def _journal(self, call: Callable[..., T], *args: Any, starts: bool = False, **options: Any) -> T:
        """Make one fenced journal write; the buffered attempt changes are committed with it.

        A write that ``starts`` something (a step, a park, a child, a successor, the run's end) asks, in its
        fence, whether the run's cancel was requested: unless the slice is compensating, it then keeps only the
        completions it carries and the workflow is left with :class:`CancelRun` to run the compensations. The
        write itself is the check: a heartbeat may never come during a short step.
        """
        try:
            result = call(self.fence(unless_canceling=starts and not self.compensating), *args, **options)
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
            note=suspend.note,
            starts=True,
        )
        self.history.count += int(suspend.insert is not None)
        self.backing_off = bool(suspend.note and "retry" in suspend.note)

    def complete(self, output: Any) -> None:
        """Finish the run with ``output``, waking a parent waiting on it and closing children by their policy."""
        parent, closing = self.run.parent_step_attempt_id, self.run.closes_children or self.spawned
        self._journal(self.store.complete_run, output, parent, starts=True, close_children=closing)

    def cancel(self, error: dict[str, Any]) -> None:
        """End the run as canceled (its cancel was requested and its compensations ran)."""
        self._journal(self.store.cancel_held, error, self.run.parent_step_attempt_id)

    def fail(self, error: dict[str, Any], attempts: int | None = None) -> None:
        """Fail the run for good (and wake a parent waiting on it); this workflow-level attempt counts as failed.

        ``attempts`` is the run's new count of failed workflow-level attempts:
        by default one more than it had, however the run failed, so a retry
        from the failed step gives its steps a fresh budget (``History``).
        """
        attempts = self.run.attempts + 1 if attempts is None else attempts
        self._journal(self.store.fail_run, error, self.run.parent_step_attempt_id, attempts)

    def reschedule(self, until: datetime, error: dict[str, Any], attempts: int) -> None:
        """Retry the whole workflow at ``until`` (a workflow-level retry)."""
        self._journal(self.store.reschedule_run, until, error, attempts, starts=True)

    def wait_for_delivery(self, **options: Any) -> DeliveredSignal | None:
        """Record or re-arm a signal/event wait and park (see ``WaitOps.wait_for_delivery``)."""
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
        from ..definitions.registry import registry

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
        if self.history.count + more >= self.max_attempts and not self.alerting:  # on_failure may pass it
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
        if deadline is not None and at > deadline and not self.alerting:  # nor the deadline: the run has failed
            raise FailRun(
                engine_error("DeadlineExceeded", f"the run's deadline {deadline.isoformat()} has passed", step)
            )
