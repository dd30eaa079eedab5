"""What a workflow function sees: ``ctx``, the :class:`WorkflowContext` (``ctx.step`` is in ``steps.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, NoReturn

from ..definitions.cron import scheduled_time
from ..definitions.payload import to_json_value
from ..durations import Duration
from ..encryption import unreadable_payload
from ..errors import StepUsageError
from ..states import StepKind, StepStatus
from ..store.records import NewAttempt
from .approvals import ApprovalDecision, TaskSubmission, TaskTimers, wait_for_approval, wait_for_input
from .attempt import StepAttemptInfo, current_attempt
from .children import ChildRun
from .interrupts import ContinueAsNew, FailRun, engine_error
from .progress import Progress, RunStream
from .slice import Slice, current_step
from .steps import StepApi

if TYPE_CHECKING:
    from django import forms

__all__ = ["ApprovalDecision", "ChildRun", "RunStream", "TaskSubmission", "WorkflowContext"]

_UNREAD = object()


class WorkflowContext:
    """The one argument of a workflow function.

    ``input`` is the run's input, ``step`` the durable step API, ``version``
    the version the run started with, ``run_id`` the run's id;
    ``scheduled_at`` the tick a schedule started the run for; ``publish`` and
    ``stream`` let readers follow the run's progress; ``set_attribute`` sets
    a typed attribute the run is found by.
    """

    def __init__(self, slice_: Slice) -> None:
        unreadable = unreadable_payload(slice_.run.input, slice_.history.completed)
        if unreadable is not None:  # not a value it cannot read, nor claimed again and again: the run fails
            kind, message = unreadable
            if kind == "PayloadFileMissing":  # an offloaded value's file is gone
                raise FailRun(engine_error("PayloadFileMissing", message))
            raise FailRun(engine_error("PayloadUndecryptable", message))
        self._slice = slice_
        self.input: Any = slice_.run.input
        self.version: str | None = slice_.run.version
        self.run_id = slice_.run.id
        self.workflow_name: str = slice_.run.workflow_name
        self.step = StepApi(slice_)
        self._scheduled_at: datetime | object | None = _UNREAD  # the slice's thread only, like the context
        self._progress = Progress(slice_)

    @property
    def scheduled_at(self) -> datetime | None:
        """The tick (UTC) this run was started for by its schedule, live or backfilled; None for other runs.

        A run started by "trigger now" reads the moment it was triggered.
        Read from the run's idempotency key (one query, the first time),
        which never changes: every replay reads the same value.
        """
        if self._scheduled_at is _UNREAD:
            self._scheduled_at = scheduled_time(self._slice.store.idempotency_key(self.run_id))
        return self._scheduled_at  # type: ignore[return-value]

    def publish(self, key: str, value: Any) -> None:
        """Set the run's latest value for ``key`` (a JSON value); ``handle.get_event(key)`` reads it.

        Written with the run's next journal write (the next step's start, a
        sleep, a wait or the run's end), so readers see a step boundary's
        values together; publishing a key twice before then writes the last
        value only. Replay-safe: the replay of a publish changes nothing, and
        a value is never replaced by an older one. Call it between steps, not
        inside a step's code (:class:`StepUsageError`).
        """
        self._progress.publish(key, value)

    def set_attribute(self, name: str, value: Any) -> None:
        """Set the run's attribute ``name`` (declared by ``@workflow(attributes=...)``) to ``value``, of its type.

        ``list_runs(attributes={"amount__gte": Decimal("10")})``, the admin,
        the CLI and the API then find the run by it. Written with the run's
        next journal write, like :meth:`publish`, so a worker that lost the
        run writes nothing; replay-safe, and never replaced by an older
        value. An undeclared name, or a value not of the declared type,
        raises :class:`InvalidArgument` saying what was expected; inside a
        step's code it raises :class:`StepUsageError`.
        """
        self._progress.set_attribute(name, value)

    def stream(self, name: str) -> RunStream:
        """The run's stream ``name``: ``ctx.stream("log").write(chunk)`` appends to it (see :class:`RunStream`)."""
        return RunStream(self._progress, name)

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

    def wait_for_approval(
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
    ) -> ApprovalDecision | None:
        """Park until someone among ``assignees`` approves or rejects; return the :class:`ApprovalDecision`.

        ``assignees``: ``"user:<username>"``, ``"group:<name>"`` or
        ``"perm:<app_label.codename>"``, one or a list; any of them (and
        any superuser) may decide, in the admin's inbox, through the API or
        with :func:`~django_openworkflow.decide_approval`. ``details`` says
        what is being approved, in the inbox. Returns ``None`` on timeout,
        like ``ctx.step.wait_for_signal``; the approval then leaves the
        inbox. A replay returns the journaled decision.

        Sign-off by several people: with ``approvals_required=N`` the run
        goes on once N distinct assignees approved, or as soon as one
        rejects. ``exclude``: users (``"user:<username>"``) who may not
        decide it whatever their groups or permissions, superusers
        included — the person who asked for it, say (segregation of
        duties, enforced by the server).

        Time: ``due`` (a duration from now, or an aware datetime, before
        the timeout) marks it overdue after that, in the Inbox, the API and
        the ``workflow_overdue_tasks`` metric; it closes nothing.
        ``remind_every`` (a duration, at least a minute) notifies the
        assignees again (the holder alone once claimed) until it is
        decided; ``escalate_after`` with ``escalate_to`` (assignees, as
        ``assignees``) adds those assignees after that long and notifies
        them. The workers fire these timers (they are stored with the
        approval, so a worker restart delays them, never loses them).
        """
        timers = TaskTimers(due, remind_every, escalate_after, escalate_to)
        return wait_for_approval(self.step, name, assignees, timeout, details, approvals_required, exclude, timers)

    def wait_for_input(
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
    ) -> TaskSubmission | None:
        """Park until someone among ``assignees`` fills in and submits ``form``; return the :class:`TaskSubmission`.

        ``form`` is a Django ``Form`` or ``ModelForm`` class, or its dotted
        path (a class is stored by its path: it must import by it, from the
        web server's process too); it may have no file field. The Inbox
        renders it with its widgets, the API publishes its fields as JSON
        Schema, and a submission is validated by the form itself (its
        ``clean()`` included) before anything is delivered.
        ``initial``: the form's initial values (JSON; a model instance as
        its primary key). ``assignees``, ``details`` and ``timeout`` are
        :meth:`wait_for_approval`'s. ``due``: when the task is due (a
        duration from now, or an aware datetime, before the timeout),
        shown in the Inbox and the API; it closes nothing. ``due``,
        ``remind_every``, ``escalate_after`` and ``escalate_to`` are
        :meth:`wait_for_approval`'s. Returns ``None`` on timeout. A replay
        returns the journaled submission.
        """
        timers = TaskTimers(due, remind_every, escalate_after, escalate_to)
        return wait_for_input(self.step, name, form, assignees, initial, details, timeout, timers)

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
        from ..definitions.registry import registry

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
