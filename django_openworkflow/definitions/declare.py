"""``@workflow``: a workflow's declaration checked, each error naming the workflow, then registered."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ..durations import Duration, parse_duration
from ..errors import InvalidArgument, PayloadError, WorkflowRegistrationError
from .alerts import RunFailure
from .attributes import check_declaration
from .children import ParentClosePolicy, check_parent_close_policy
from .flow import (
    DEFAULT_QUEUE,
    Concurrency,
    Debounce,
    KeyFunction,
    OnEvent,
    RateLimit,
    Schedule,
    check_key,
    check_priority,
    check_queue,
)
from .registry import WorkflowFunction, WorkflowSpec, registry
from .retention import parse_retention
from .retry import DEFAULT_STEP_RETRY_POLICY, DEFAULT_WORKFLOW_RETRY_POLICY, RetryPolicy


def workflow(
    fn: WorkflowFunction | None = None,
    *,
    name: str | None = None,
    version: str | None = None,
    retry_policy: RetryPolicy | None = None,
    step_retry_policy: RetryPolicy | None = None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    concurrency: Concurrency | int | None = None,
    rate_limit: RateLimit | None = None,
    debounce: Debounce | None = None,
    fairness_key: KeyFunction | str | None = None,
    schedule: Schedule | str | None = None,
    on_event: OnEvent | str | list[OnEvent | str] | tuple[OnEvent | str, ...] | None = None,
    step_timeout: Duration | None = None,
    compensate_on_cancel: bool = False,
    retention: Duration | None = None,
    on_failure: Callable[[RunFailure], Any] | None = None,
    parent_close_policy: str = ParentClosePolicy.ABANDON,
    attributes: dict[str, type] | None = None,
) -> Any:
    """Declare a durable workflow: ``@workflow`` or ``@workflow(name=..., version=...)``.

    The function takes one argument, the :class:`WorkflowContext`, and returns
    a JSON-serializable value. ``name`` defaults to the function's name.
    Flow control (see :mod:`django_openworkflow.definitions.flow`): ``queue`` names the
    queue its runs wait in, ``priority`` orders them within it (higher
    first), ``concurrency`` (a :class:`Concurrency` or a plain limit) caps
    how many hold a worker at once, ``rate_limit`` how many start per
    period, ``debounce`` folds starts together, ``fairness_key`` (a function
    of the input, or a string) groups its runs for the turns a queue listed in
    ``OPENWORKFLOW["FAIR_QUEUES"]`` takes, and ``schedule`` (a
    :class:`Schedule` or a cron expression) starts runs on a timetable.
    ``on_event`` (an event type, an :class:`OnEvent` with a match pattern,
    or a list of them) makes ``send_event`` start a run, with the event's
    payload as input, for each matching event. ``step_timeout`` is the
    default ``timeout`` of its ``ctx.step.run`` steps. An ``async def``
    function makes an async workflow (its ``ctx.step`` calls are awaited).
    With ``compensate_on_cancel``, canceling a run that has started runs
    its steps' compensations (``ctx.step.run(..., compensate=...)``) before
    it ends as canceled. ``retention`` is how long its runs are kept once
    finished (default ``OPENWORKFLOW["RETENTION"]``; a start may override it).
    ``on_failure(failure)`` (a :class:`~django_openworkflow.definitions.alerts.RunFailure`)
    runs as a durable step named ``on-failure`` once a run has failed for
    good, after its compensations, before it is stored as failed.
    ``parent_close_policy`` (``"abandon"``, ``"terminate"`` or
    ``"request_cancel"``) is what happens to the unfinished children its
    runs start when the run ends; ``ctx.step.run_workflow`` and
    ``start_workflow`` may say otherwise per child. ``attributes``
    (``{"region": str, "amount": Decimal}``) declares the typed attributes
    its runs are found by: set at the start (``run(..., attributes=...)``) or
    by ``ctx.set_attribute``; ``int``, ``str``, ``Decimal`` and ``datetime``.
    """

    def decorate(func: WorkflowFunction) -> WorkflowSpec:
        if not callable(func):
            raise WorkflowRegistrationError(f"@workflow needs a function, got {func!r}")
        if inspect.isgeneratorfunction(func) or inspect.isasyncgenfunction(func):
            raise WorkflowRegistrationError(
                f"workflow {func.__module__}.{func.__qualname__} must be a plain or async function, not a generator"
            )
        wf_name = func.__name__ if name is None else name
        if not isinstance(wf_name, str) or not wf_name or len(wf_name) > 255:
            raise WorkflowRegistrationError(
                f"workflow name must be a non-empty string of at most 255 characters, got {wf_name!r}"
            )
        where = f"workflow {wf_name!r}"
        if version is not None and (not isinstance(version, str) or not version or len(version) > 255):
            raise WorkflowRegistrationError(
                f"{where}: version must be None or a non-empty string of at most 255 characters, got {version!r:.80}"
            )
        from .payload import check_text  # not at import time: settings may import this package

        for label, text in (("name", wf_name), ("version", version)):
            try:
                check_text(text or "", f"workflow {label}")
            except PayloadError as exc:
                raise WorkflowRegistrationError(str(exc)) from exc
        for label, policy in (("retry_policy", retry_policy), ("step_retry_policy", step_retry_policy)):
            if policy is not None and not isinstance(policy, RetryPolicy):
                raise WorkflowRegistrationError(f"{where}: {label} must be a RetryPolicy, got {policy!r:.80}")
        limit = Concurrency(concurrency) if type(concurrency) is int else concurrency
        for label, value, kind in (
            ("concurrency", limit, Concurrency),
            ("rate_limit", rate_limit, RateLimit),
            ("debounce", debounce, Debounce),
        ):
            if value is not None and not isinstance(value, kind):
                raise WorkflowRegistrationError(f"{where}: {label} must be a {kind.__name__}, got {value!r:.80}")
            if value is not None:
                value.check(where)  # made before @workflow ran: its error is raised here, with the name
        timetable = Schedule(schedule) if isinstance(schedule, str) else schedule
        if timetable is not None and not isinstance(timetable, Schedule):
            raise WorkflowRegistrationError(
                f"{where}: schedule must be a cron expression or a Schedule, got {schedule!r:.80}"
            )
        if timetable is not None:
            timetable.check(where)
        subscriptions = on_event if isinstance(on_event, list | tuple) else [] if on_event is None else [on_event]
        events = tuple(OnEvent(sub) if isinstance(sub, str) else sub for sub in subscriptions)
        for sub in events:
            if not isinstance(sub, OnEvent):
                raise WorkflowRegistrationError(
                    f"{where}: on_event must be an event type, an OnEvent or a list of them, got {sub!r:.80}"
                )
            sub.check(where)
        if step_timeout is not None:
            try:
                if parse_duration(step_timeout).total_seconds() <= 0:
                    raise ValueError("it must be positive")
            except (TypeError, ValueError) as exc:
                raise WorkflowRegistrationError(f"{where}: step_timeout {step_timeout!r:.40}: {exc}") from exc
        if on_failure is not None and not callable(on_failure):
            raise WorkflowRegistrationError(f"{where}: on_failure must be a callable, got {on_failure!r:.80}")
        try:
            close_policy = check_parent_close_policy(parent_close_policy, where)
        except ValueError as exc:
            raise WorkflowRegistrationError(str(exc)) from exc
        try:
            kept = parse_retention(retention, f"{where}: retention")
        except ValueError as exc:
            raise WorkflowRegistrationError(str(exc)) from exc
        try:
            declared = check_declaration(attributes, where)
        except ValueError as exc:
            raise WorkflowRegistrationError(str(exc)) from exc
        spec = WorkflowSpec(
            name=wf_name,
            version=version,
            fn=func,
            retry_policy=retry_policy or DEFAULT_WORKFLOW_RETRY_POLICY,
            step_retry_policy=step_retry_policy or DEFAULT_STEP_RETRY_POLICY,
            queue=_declared(check_queue, queue, where),
            priority=_declared(check_priority, priority, where),
            concurrency=limit if isinstance(limit, Concurrency) else None,
            rate_limit=rate_limit,
            debounce=debounce,
            fairness_key=_fairness_key(fairness_key, where),
            schedule=timetable,
            on_event=events,
            step_timeout=step_timeout,
            compensate_on_cancel=bool(compensate_on_cancel),
            retention=kept,
            on_failure=on_failure,
            parent_close_policy=close_policy,
            attributes=declared,
        )
        return registry.register(spec)

    if fn is not None:
        return decorate(fn)
    return decorate


def _declared(check: Callable[[Any, str], Any], value: Any, where: str) -> Any:
    """A start-time check (which raises InvalidArgument) applied to a declaration."""
    try:
        return check(value, where)
    except InvalidArgument as exc:  # its message starts with ``where``
        raise WorkflowRegistrationError(str(exc)) from exc


def _fairness_key(key: Any, where: str) -> KeyFunction | str | None:
    try:
        return check_key(key, "fairness_key")
    except WorkflowRegistrationError as exc:
        raise WorkflowRegistrationError(f"{where}: {exc}") from exc
