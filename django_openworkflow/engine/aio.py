"""``async def`` workflows: an event loop per slice, and ``ctx.step`` methods that return awaitables.

The loop runs on the worker slot's own thread, so sync and async workflows
share the slots, the leases and the journal. Every ``ctx.step.*`` call does
its bookkeeping *when it is called* (names are assigned in call order, so
``asyncio.gather(ctx.step.run("a", f), ctx.step.run("b", g))`` replays the
same whatever finishes first) and returns an awaitable. Only a ``run``
step's own code runs concurrently: async code on the loop, sync code on a
thread of its own.

The journal's writes are short and synchronous; they run on the loop's
thread with the loop set aside (:func:`outside_loop`), exactly as they run
between the steps of a sync workflow. Code in an async workflow that uses
the ORM itself must use its async API or ``sync_to_async``, as anywhere in
Django.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ..definitions.retry import RetryPolicy
from ..durations import Duration
from ..errors import StepFailed, StepUsageError
from ..states import StepKind, StepStatus
from ..store.records import EngineInterrupt, NewAttempt
from .approvals import ApprovalDecision, TaskSubmission, TaskTimers, wait_for_approval, wait_for_input
from .attempt import StepAttemptInfo, reset_attempt, set_attempt
from .children import ChildRun
from .context import WorkflowContext
from .interrupts import Suspend
from .slice import Slice, current_step
from .steps import StepApi
from .threads import Ended, count_abandoned

if TYPE_CHECKING:
    from django import forms

    from ..definitions.registry import WorkflowSpec

T = TypeVar("T")


@contextmanager
def outside_loop() -> Iterator[None]:
    """Run synchronous journal code from inside the loop: Django refuses ORM calls while a loop runs."""
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(loop)


def _ready(value: Any = None, error: BaseException | None = None) -> asyncio.Future[Any]:
    """An awaitable that is done already: with ``value``, or raising ``error``."""
    future = asyncio.get_running_loop().create_future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


class AsyncStepApi:
    """``ctx.step`` in an ``async def`` workflow: the same primitives, each returning an awaitable."""

    def __init__(self, slice_: Slice) -> None:
        self._slice = slice_
        self._sync = StepApi(slice_)

    def run(
        self,
        name: str,
        fn: Callable[[], Any],
        *,
        retry_policy: RetryPolicy | None = None,
        timeout: Duration | None = None,
        compensate: Callable[[Any], Any] | None = None,
    ) -> Awaitable[Any]:
        """Like the sync ``ctx.step.run``; ``fn`` may be an ``async def`` function (awaited on the loop)
        or a plain one (run on a thread of its own). A timeout cancels async code and abandons sync code."""
        s = self._slice
        try:
            with outside_loop():
                key = s.enter_step_api("run", name)
                done = self._sync._prepare(key, fn, retry_policy, compensate)
                if done is None:
                    policy = retry_policy or s.spec.step_retry_policy
                    limit = s.step_timeout(timeout)
                    s.check_can_start(key)
        except (EngineInterrupt, StepFailed) as exc:
            # Raised when awaited, so the calls after this one in a gather(...) still happen
            # (and register their compensations) exactly as in the pass that ran them.
            return _ready(error=exc)
        if done is not None:
            return _ready(done.output)
        s.steps_called += 1
        return self._execute(key, fn, policy, limit, compensate, s.attempt(key))

    async def _execute(
        self,
        key: str,
        fn: Callable[[], Any],
        policy: RetryPolicy,
        limit: float | None,
        compensate: Callable[[Any], Any] | None,
        attempt: StepAttemptInfo,
    ) -> Any:
        s = self._slice
        token = current_step.set(key)
        attempt_token = set_attempt(attempt)  # this task's context, and the thread's copy of it
        task = asyncio.current_task()
        if task is not None:
            s.async_tasks.add(task)
        try:
            started = s.now()
            # Alone, like the first step of a sync slice: no start record (the watchdog writes one if it runs long).
            alone = not s.pending and s.steps_running == 0 and not s.has_running_step()
            attempt_id = None
            if alone:
                s.begin_step(key, started, None, exclusive=False)
            else:
                with outside_loop():
                    attempt_id = s.record_step(NewAttempt(key, StepKind.RUN, StepStatus.RUNNING, started_at=started))
            s.steps_running += 1
            try:
                ended = await _call(fn, limit, s)
            finally:
                s.steps_running -= 1
            if alone:
                attempt_id = s.end_step()
            with outside_loop():
                return self._sync.conclude(
                    key, attempt_id, started, policy, ended, limit, compensate, flush_now=s.steps_running > 0
                )
        finally:
            s.steps_called -= 1
            reset_attempt(attempt_token)
            current_step.reset(token)

    def _now(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        """Call a sync step method at once and hand back its result, or its park, as an awaitable."""
        try:
            with outside_loop():
                value = method(*args, **kwargs)
        except (EngineInterrupt, StepFailed) as exc:
            return _ready(error=exc)
        return _ready(value)

    def _wait_alone(self, api: str) -> None:
        """A signal or event wait writes its park at once: no other step of the run may still be running."""
        if self._slice.steps_called:
            raise StepUsageError(
                f"ctx.step.{api}() was called while other steps of this run are still running; "
                "await them first (a wait parks the run at once, and their results would be lost)"
            )

    def sleep(self, name: str, duration: Duration) -> Awaitable[None]:
        return self._now(self._sync.sleep, name, duration)

    def run_workflow(self, workflow: Any, input: Any = None, **options: Any) -> Awaitable[Any]:
        return self._now(self._sync.run_workflow, workflow, input, **options)

    def start_workflow(self, workflow: Any, input: Any = None, **options: Any) -> Awaitable[ChildRun]:
        return self._now(self._sync.start_workflow, workflow, input, **options)

    def wait_all(self, children: list[ChildRun]) -> Awaitable[list[Any]]:
        return self._now(self._sync.wait_all, children)

    def wait_first(self, children: list[ChildRun], **options: Any) -> Awaitable[tuple[int, Any]]:
        return self._now(self._sync.wait_first, children, **options)

    def wait_for_signal(self, name: str, **options: Any) -> Awaitable[Any]:
        self._wait_alone("wait_for_signal")
        return self._now(self._sync.wait_for_signal, name, **options)

    def wait_for_event(self, name: str, **options: Any) -> Awaitable[Any]:
        self._wait_alone("wait_for_event")
        return self._now(self._sync.wait_for_event, name, **options)


async def _call(fn: Callable[[], Any], limit: float | None, s: Slice) -> Ended:
    """Run a step's code: on the loop if it is async, else on a thread; never raises for the code's errors."""
    started = time.monotonic()
    timer = asyncio.timeout(limit)
    try:
        async with timer:
            if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "func", None)):
                value = await fn()
            else:
                value = await _on_thread(fn, s)
                if inspect.isawaitable(value):  # a lambda around an async call
                    value = await value
        return Ended(0, value, seconds=time.monotonic() - started)
    except EngineInterrupt:
        raise
    except BaseException as exc:  # user code: anything, SystemExit included
        if timer.expired():  # the step's timeout, not a TimeoutError of the code's own
            return Ended(0, timed_out=True, seconds=time.monotonic() - started)
        return Ended(0, error=exc, seconds=time.monotonic() - started)


def _on_thread(fn: Callable[[], Any], s: Slice) -> asyncio.Future[Any]:
    """``fn()`` on a daemon thread; the future is cancelled (and the thread abandoned) on timeout."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if future.cancelled():
            count_abandoned(-1)
        elif error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)

    context = contextvars.copy_context()

    def target() -> None:
        value, error = None, None
        try:
            value = context.run(fn)
        except BaseException as exc:  # handed to the loop as the step's error
            error = exc
        finally:
            s.store.close_thread_connections()
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: the slice ended without this step
            count_abandoned(-1)

    def abandoned(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            count_abandoned(1)

    future.add_done_callback(abandoned)
    threading.Thread(target=target, name="owf-async-step", daemon=True).start()
    return future


class AsyncWorkflowContext(WorkflowContext):
    """The argument of an ``async def`` workflow: ``ctx.step`` methods return awaitables."""

    step: AsyncStepApi  # type: ignore[assignment]

    def __init__(self, slice_: Slice) -> None:
        super().__init__(slice_)
        self.step = AsyncStepApi(slice_)

    def is_canceled(self) -> bool:
        with outside_loop():
            return super().is_canceled()

    def lease_held(self, check: bool = False) -> bool:
        with outside_loop():
            return super().lease_held(check)

    @property
    def scheduled_at(self) -> datetime | None:
        with outside_loop():  # its first read is a query
            return super().scheduled_at

    def wait_for_approval(  # type: ignore[override]  # awaitable, as every wait of an async workflow
        self,
        name: str,
        *,
        assignees: str | list[str],
        timeout: Duration = "7d",
        details: str = "",
        approvals_required: int = 1,
        exclude: str | Sequence[str] = (),
        due: Duration | datetime | None = None,
        remind_every: Duration | None = None,
        escalate_after: Duration | None = None,
        escalate_to: str | Sequence[str] = (),
    ) -> Awaitable[ApprovalDecision | None]:
        """``await ctx.wait_for_approval(...)``: :meth:`WorkflowContext.wait_for_approval` in an async workflow."""
        self.step._wait_alone("wait_for_approval")
        timers = TaskTimers(due, remind_every, escalate_after, escalate_to)
        return self.step._now(
            wait_for_approval, self.step._sync, name, assignees, timeout, details, approvals_required, exclude, timers
        )

    def wait_for_input(  # type: ignore[override]  # awaitable, as every wait of an async workflow
        self,
        name: str,
        *,
        form: type[forms.BaseForm] | str,
        assignees: str | list[str],
        initial: dict[str, Any] | None = None,
        details: str = "",
        timeout: Duration = "7d",
        due: Duration | datetime | None = None,
        remind_every: Duration | None = None,
        escalate_after: Duration | None = None,
        escalate_to: str | Sequence[str] = (),
    ) -> Awaitable[TaskSubmission | None]:
        """``await ctx.wait_for_input(...)``: :meth:`WorkflowContext.wait_for_input` in an async workflow."""
        self.step._wait_alone("wait_for_input")
        timers = TaskTimers(due, remind_every, escalate_after, escalate_to)
        return self.step._now(wait_for_input, self.step._sync, name, form, assignees, initial, details, timeout, timers)


def call_async(spec: WorkflowSpec, ctx: AsyncWorkflowContext) -> Any:
    """Run an async workflow function on a fresh event loop, until it returns or leaves the slice.

    Steps still running when the function returns or raises (a gathered
    step failed, or one parked the run) are awaited first, so what they
    finish is journaled; the earliest wake-up among those that parked wins.
    """
    s = ctx._slice

    async def main() -> Any:
        try:
            return await spec.fn(ctx)
        finally:
            others = [task for task in s.async_tasks if task is not asyncio.current_task() and not task.done()]
            if others:
                for result in await asyncio.gather(*others, return_exceptions=True):
                    if isinstance(result, Suspend):
                        s.suspends.append(result)

    try:
        return asyncio.run(main())
    except Suspend as suspend:
        earliest = min((other.until for other in s.suspends), default=suspend.until)
        if earliest < suspend.until and not suspend.written:
            suspend.until = earliest  # another step's retry is due first; the rest is looked at again then
        raise
