"""The steps that run code: ``ctx.step.run``, ``parallel`` and ``map``; and ``sleep``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

from django.utils.dateparse import parse_datetime

from ..definitions.payload import to_json_value
from ..definitions.retry import RetryPolicy
from ..durations import Duration, parse_duration
from ..errors import PayloadError, StepFailed, StepTimeout, StepUsageError
from ..states import StepKind, StepStatus
from ..store.records import AttemptRecord, AttemptUpdate, EngineInterrupt, NewAttempt
from .attempt import in_attempt
from .interrupts import Suspend, error_from_exception, retry_decision, retry_detail, retry_note
from .threads import Ended, run_on_threads

if TYPE_CHECKING:
    from .slice import Slice

T = TypeVar("T")

PARALLEL_THREADS = 16
"""Threads a parallel group runs at most at once, unless ``max_workers`` says otherwise."""


@dataclass
class Settled:
    """What became of a step whose code ended: its output, or its error and when it may be retried."""

    key: str
    output: Any = None
    error: dict[str, Any] | None = None
    retry_at: datetime | None = None  # None with an error: failed for good
    failures: int = 0
    max_attempts: int = 0  # the step's retry policy's (0: unlimited)


class RunSteps:
    """``run``, ``parallel``, ``map`` and ``sleep``: a mixin of :class:`~django_openworkflow.engine.steps.StepApi`."""

    _slice: Slice  # set by StepApi

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
            # The run keeps the failure as a note while it backs off: it shows as retrying, with the error.
            note: dict[str, Any] = {key: settled.error[key] for key in ("type", "message") if key in settled.error}
            note.update(step=settled.key, retry=retry_note("step", settled.failures, settled.max_attempts))
            reason = retry_detail(
                f"step {settled.key!r}", settled.error, settled.failures, settled.max_attempts, settled.retry_at
            )
            raise Suspend(settled.retry_at, reason, note=note)
        raise StepFailed(settled.key, settled.error)

    def _run_atomic(self, key: str, fn: Callable[[], Any], policy: RetryPolicy) -> Any:
        s = self._slice
        started = s.now()
        s.in_step = key
        try:
            # The journal's own write or the commit failing raises StoreUnavailable, which passes through.
            with s.store.atomic_step(s.fence) as record:
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
        return Settled(key, error=error, retry_at=retry_at, failures=failures, max_attempts=policy.maximum_attempts)

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
