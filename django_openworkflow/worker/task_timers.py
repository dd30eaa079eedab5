"""Human tasks' timers: reminders (``remind_every``) and escalations (``escalate_after``), fired by the workers.

The timers are columns of the approval row, written when the task opens
(``store/approvals.py``); every ``OPENWORKFLOW["TASK_TIMERS_INTERVAL"]`` one
worker gets the turn (``turns.py``) and fires those due, each under its
row's lock, then notifies (``hooks.task_timer_fired``, which calls
``APPROVAL_NOTIFY``). Nothing is kept in a process: a timer due while every
worker was down fires at the first sweep after one starts again, once.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from .. import hooks
from ..store import get_backend
from ..store.interface import ApprovalStore
from ..store.records import FiredTimer
from .turns import TurnSweeper

logger = logging.getLogger("django_openworkflow.task_timers")

__all__ = ["TASK_TIMERS_TURN_PREFIX", "TaskTimerSweeper", "fire_task_timers"]

TASK_TIMERS_TURN_PREFIX = "task-timers-turn:"


def fire_task_timers(*, store: ApprovalStore | None = None, limit: int = 500) -> list[FiredTimer]:
    """Fire the human tasks' reminders and escalations that are due, and notify; what fired.

    The workers call it every ``TASK_TIMERS_INTERVAL``; tests call it after
    ``advance()`` (or, on an in-memory backend, ``clock.advance()`` with
    ``store=``). Each fired timer is stored (the task's activity, an
    escalation's assignees) before ``hooks.task_timer_fired`` is sent for
    it: a notification is sent at most once.
    """
    backend: ApprovalStore = store or get_backend()
    fired = backend.fire_task_timers(limit)
    for timer in fired:
        task = timer.approval
        hooks.send(
            hooks.task_timer_fired,
            timer.workflow_name,
            run_id=task.run_id,
            step=task.step_key,
            name=task.name,
            details=task.details,
            assignees=timer.notify,
            timeout_at=task.timeout_at,
            form=task.form,
            due_at=task.due_at,
            approval_id=task.id,
            claimed_by=task.claimed_by,
            reason=timer.reason,
        )
    return fired


class TaskTimerSweeper(TurnSweeper):
    """A worker's thread that fires the tasks' timers every ``TASK_TIMERS_INTERVAL``, when it gets the turn."""

    turn_prefix = TASK_TIMERS_TURN_PREFIX
    what = "task timers sweep"

    def __init__(self, interval: timedelta) -> None:
        super().__init__("owf-task-timers", interval, logger)

    def sweep(self) -> int:
        """Fire what is due; how many timers fired."""
        fired = fire_task_timers()
        if fired:
            logger.info("fired %d human task timer(s)", len(fired))
        return len(fired)
