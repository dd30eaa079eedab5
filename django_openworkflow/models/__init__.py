"""The tables: workflow runs (the queue and their state), step attempts (the journal), their signals,
events, gates, approvals and schedules, what runs publish and stream, the workers' heartbeat rows and
paused queues, the HTTP API's tokens and runs' typed attributes."""

from ..states import CLAIMABLE_STATUSES, FINISHED_STATUSES, RunStatus, StepKind, StepStatus
from .approvals import Approval, ApprovalStatus
from .attributes import RunAttribute
from .messages import Event, Gate, Signal
from .operations import QueueState, Schedule, WorkerProcess
from .progress import PublishedValue, StreamChunk
from .runs import IS_HELD, IS_PARKED, StepAttempt, WorkflowRun
from .tokens import TOKEN_PREFIX_LENGTH, TOKEN_START, ApiToken, ApiTokenManager, token_digest

__all__ = [
    "CLAIMABLE_STATUSES",
    "FINISHED_STATUSES",
    "IS_HELD",
    "IS_PARKED",
    "TOKEN_PREFIX_LENGTH",
    "TOKEN_START",
    "ApiToken",
    "ApiTokenManager",
    "Approval",
    "ApprovalStatus",
    "Event",
    "Gate",
    "PublishedValue",
    "QueueState",
    "RunAttribute",
    "RunStatus",
    "Schedule",
    "Signal",
    "StepAttempt",
    "StepKind",
    "StepStatus",
    "StreamChunk",
    "WorkerProcess",
    "WorkflowRun",
    "token_digest",
]
