"""Durable workflows for Django, checkpointed in your own database.

The public API: declare with :func:`workflow`, start with ``spec.run()``,
follow with :func:`get_run` / :class:`RunHandle`, find with :func:`list_runs`
(and an object's runs with :func:`runs_for`; erase their payloads with :func:`forget`).
"""

from typing import TYPE_CHECKING

from .definitions.alerts import RunFailure
from .definitions.declare import workflow
from .definitions.flow import Concurrency, Debounce, OnEvent, RateLimit, Schedule
from .definitions.registry import WorkflowSpec
from .definitions.retry import RetryPolicy
from .engine.attempt import StepAttemptInfo
from .errors import (
    DeterminismError,
    EventNotPublished,
    ForgetRefused,
    NonRetryableError,
    OpenWorkflowError,
    PayloadError,
    ProgressTimeout,
    ResultTimeout,
    RetryAfter,
    RunNotFound,
    SignalError,
    StepFailed,
    StepTimeout,
    StepUsageError,
    UnknownWorkflowError,
    WorkflowCanceled,
    WorkflowFailed,
    WorkflowRegistrationError,
)

if TYPE_CHECKING:  # the names __getattr__ loads lazily, as type checkers and editors should see them
    from .client import operations  # noqa: F401  (not in __all__: reached as django_openworkflow.operations)
    from .client.approvals import decide_approval
    from .client.erasure import Forgotten, forget
    from .client.events import PublishedEvent, publish_event, send_event
    from .client.handle import RunHandle, get_run, send_signal
    from .client.human_tasks import claim_task, reassign_task, release_task, submit_task
    from .client.listing import RunPage, StepRecord, list_runs
    from .client.runs import start_run, start_runs
    from .client.schedules import backfill_schedule, trigger_schedule
    from .client.subjects import runs_for
    from .engine.aio import AsyncWorkflowContext
    from .engine.approvals import ApprovalDecision, TaskSubmission
    from .engine.context import ChildRun, WorkflowContext

__all__ = [
    "ApprovalDecision",
    "AsyncWorkflowContext",
    "ChildRun",
    "Concurrency",
    "Debounce",
    "DeterminismError",
    "EventNotPublished",
    "ForgetRefused",
    "Forgotten",
    "NonRetryableError",
    "OnEvent",
    "OpenWorkflowError",
    "PayloadError",
    "ProgressTimeout",
    "PublishedEvent",
    "RateLimit",
    "ResultTimeout",
    "RetryAfter",
    "RetryPolicy",
    "RunFailure",
    "RunHandle",
    "RunNotFound",
    "RunPage",
    "Schedule",
    "SignalError",
    "StepAttemptInfo",
    "StepFailed",
    "StepRecord",
    "StepTimeout",
    "StepUsageError",
    "TaskSubmission",
    "UnknownWorkflowError",
    "WorkflowCanceled",
    "WorkflowContext",
    "WorkflowFailed",
    "WorkflowRegistrationError",
    "WorkflowSpec",
    "backfill_schedule",
    "claim_task",
    "decide_approval",
    "forget",
    "get_run",
    "list_runs",
    "publish_event",
    "reassign_task",
    "release_task",
    "runs_for",
    "send_event",
    "send_signal",
    "start_run",
    "start_runs",
    "submit_task",
    "trigger_schedule",
    "workflow",
]

__version__ = "0.3.0"  # CHANGELOG.md says what each version brought


def __getattr__(name: str) -> object:
    # Names that import models are loaded lazily so that importing the
    # package (e.g. from settings) does not need the app registry ready.
    if name in ("start_run", "start_runs"):
        from .client import runs

        return getattr(runs, name)
    if name in ("RunHandle", "get_run", "send_signal"):
        from .client import handle

        return getattr(handle, name)
    if name == "runs_for":
        from .client.subjects import runs_for

        return runs_for
    if name in ("forget", "Forgotten"):
        from .client import erasure

        return getattr(erasure, name)
    if name in ("send_event", "publish_event", "PublishedEvent"):
        from .client import events

        return getattr(events, name)
    if name in ("WorkflowContext", "ChildRun"):
        from .engine import context

        return getattr(context, name)
    if name in ("list_runs", "RunPage", "StepRecord"):
        from .client import listing

        return getattr(listing, name)
    if name == "operations":
        # Cancel, retry and re-run (the README's "Operating on runs"): a module of the client
        # since the package was regrouped, still reachable as ``from django_openworkflow import operations``.
        from .client import operations

        return operations
    if name in ("backfill_schedule", "trigger_schedule"):
        from .client import schedules

        return getattr(schedules, name)
    if name in ("ApprovalDecision", "TaskSubmission"):
        from .engine import approvals

        return getattr(approvals, name)
    if name == "decide_approval":
        from .client.approvals import decide_approval

        return decide_approval
    if name in ("submit_task", "claim_task", "release_task", "reassign_task"):
        from .client import human_tasks

        return getattr(human_tasks, name)
    if name == "AsyncWorkflowContext":
        from .engine.aio import AsyncWorkflowContext

        return AsyncWorkflowContext
    raise AttributeError(f"module 'django_openworkflow' has no attribute {name!r}")
