"""Child workflows: :class:`ChildRun`, and the steps that start children and wait for them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime

from ..definitions.children import ParentClosePolicy, check_parent_close_policy
from ..definitions.payload import to_json_value
from ..durations import Duration, parse_duration
from ..errors import StepFailed, StepUsageError
from ..states import FINISHED_STATUSES, RunStatus, StepKind, StepStatus
from ..store.records import AttemptUpdate, ChildStart, NewAttempt, RunOutcome
from .interrupts import Suspend, engine_error

if TYPE_CHECKING:
    from ..definitions.registry import WorkflowSpec
    from .slice import Slice

CHILD_WAIT = timedelta(days=365)
"""How long ``wait_all``/``wait_first`` park at most before looking again (a child's end wakes them)."""


class ChildRun:
    """A child run started by ``ctx.step.start_workflow``: wait with ``wait_all``, ``wait_first`` or :meth:`result`.

    ``run_id`` is known once the start is written (at the run's next
    journal write, or when a wait needs it).
    """

    def __init__(
        self,
        api: ChildSteps,
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
    from ..definitions.registry import WorkflowSpec, registry

    if isinstance(workflow, WorkflowSpec):
        return workflow
    if isinstance(workflow, str):
        return registry.latest(workflow)
    raise StepUsageError(f"ctx.step.{api}() needs a workflow or a workflow name, got {workflow!r}")


class ChildSteps:
    """``run_workflow``, ``start_workflow``, ``wait_all``, ``wait_first``: a mixin of ``StepApi``."""

    _slice: Slice  # set by StepApi

    def run_workflow(
        self,
        workflow: WorkflowSpec | str,
        input: Any = None,
        *,
        name: str | None = None,
        timeout: Duration = "1y",
        parent_close_policy: str | None = None,
        inherit_deadline: bool = False,
    ) -> Any:
        """Start a child workflow exactly once and wait for it durably; return its output.

        The parent is parked (no worker slot held) and woken as soon as the
        child finishes. A failed or canceled child raises :class:`StepFailed`
        carrying the child's error; so does ``timeout``, after which the child
        keeps running on its own. ``name`` (the durable key) defaults to the
        child workflow's name; a string picks the highest registered version.
        ``parent_close_policy`` (``"abandon"``, ``"terminate"``,
        ``"request_cancel"``; default: the parent workflow's) is what this
        run's end does to the child if it has not finished; with
        ``inherit_deadline`` the child's deadline is this run's.
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
            start = self._child_start(spec, input, key, parent_close_policy, inherit_deadline)
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

    def _child_start(
        self, spec: WorkflowSpec, input: Any, key: str, policy: str | None, inherit_deadline: bool
    ) -> ChildStart:
        s = self._slice
        where = f"child workflow {spec.name!r} (step {key!r})"
        close = s.spec.parent_close_policy if policy is None else check_parent_close_policy(policy, where)
        child_input = to_json_value(input, f"input of {where}", "input")
        flow = spec.flow_fields(child_input)
        if close != ParentClosePolicy.ABANDON:
            flow.update(parent_close_policy=close, closes_with=s.run.id)
        if inherit_deadline:
            flow["deadline_at"] = s.run.deadline_at  # the child has no deadline of its own: it gets the parent's
        return ChildStart(spec.name, spec.version, child_input, flow)

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
            # The child's own error, without the errors of its children: a chain of
            # failed descendants would otherwise nest one level deeper per generation
            # (each run's error links its child by child_run_id).
            child_error = {k: v for k, v in (outcome.error or {}).items() if k != "child_error"}
            cause = ": ".join(str(child_error[k]) for k in ("type", "message") if child_error.get(k))
            message = f"child run {child_id} {outcome.status}" + (f": {cause}" if cause else "")
            error = engine_error("ChildWorkflowFailed", message, key)
            error["child_error"] = child_error
        error.update(child_run_id=str(child_id), run_attempt=s.run.attempts, retryable=False)
        s.add_finished(AttemptUpdate(attempt_id, StepStatus.FAILED, now, error=error))
        s.history.add_failure(key, error)
        return ChildRun(self, key, child_id, done=True, error=error)

    def start_workflow(
        self,
        workflow: WorkflowSpec | str,
        input: Any = None,
        *,
        name: str | None = None,
        parent_close_policy: str | None = None,
        inherit_deadline: bool = False,
    ) -> ChildRun:
        """Start a child workflow exactly once without waiting for it; returns a :class:`ChildRun`.

        Start as many as you like, then wait for them with :meth:`wait_all`
        or :meth:`wait_first` (or ``child.result()``). The starts are
        written together with the run's next journal write, each as a step
        of its own (``name`` defaults to the workflow's name, numbered on
        repeats: ``resize``, ``resize:1``...). ``parent_close_policy`` and
        ``inherit_deadline`` as for :meth:`run_workflow`.
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
        start = self._child_start(spec, input, key, parent_close_policy, inherit_deadline)
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
