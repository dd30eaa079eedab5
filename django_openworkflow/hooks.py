"""Lifecycle hooks: Django signals sent as runs and steps progress, for metrics, tracing and your own code.

Connect a receiver as to any Django signal::

    from django.dispatch import receiver
    from django_openworkflow import hooks

    @receiver(hooks.run_finished)
    def count(sender, *, run_id, workflow_name, status, error, **kwargs): ...

They are sent in the process that executes the run (a ``runworkflows``
worker, a Celery worker) — a cancel's ``run_finished`` in the process that
canceled — with ``sender`` the workflow's name. A receiver
that raises is logged and ignored: it cannot fail a run. Receivers run on
the worker's slot thread, so keep them quick.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_openworkflow.hooks")

run_started = Signal()
"""A worker began executing a run for the first time. Keyword arguments: ``run_id``, ``workflow_name``,
``queue``."""

run_finished = Signal()
"""A run completed, failed or was canceled. ``run_id``, ``workflow_name``, ``status``, ``error``; from a
worker also ``queue`` and ``seconds`` (from the run's first start to its end, by the database clock)."""

run_parked = Signal()
"""A run let go of its worker until ``until`` (a sleep, a wait, a retry's backoff). ``run_id``,
``workflow_name``, ``until``, ``reason``, ``queue``, ``outcome`` ("parked", "retry": the workflow
will be tried again, "unknown-workflow")."""

step_finished = Signal()
"""A step's code returned or raised (its journal entry is written with the run's next write).
``run_id``, ``workflow_name``, ``step``, ``status`` ("completed", "failed"), ``seconds``, ``error``,
``attempt`` (1 for the first attempt in the run's current workflow-level attempt, 2 for its first retry ...)."""

signal_sent = Signal()
"""``send_signal`` stored a signal for a run (sent in the sender's process, e.g. a web request, once the
call returns, even if a transaction around it rolls back later). ``run_id``, ``workflow_name``,
``signal_name``, ``delivered`` (a waiting step took it now), ``seconds``."""

approval_opened = Signal()
"""A run began waiting for an approval (``ctx.wait_for_approval``) or a task's form, sent by the worker once
the approval is stored, at most once. ``run_id``, ``workflow_name``, ``step`` (the wait's step key), ``name``,
``details``, ``assignees`` (``{"users", "groups", "permissions"}``), ``timeout_at``; for a task that asks for a form
(``ctx.wait_for_input``), ``form`` (its dotted path; "" for a yes/no approval) and ``due_at`` (or None).
``OPENWORKFLOW["APPROVAL_NOTIFY"]`` mails the assignees from it (``alerts.py``)."""

task_timer_fired = Signal()
"""A human task's reminder (``remind_every``) or escalation (``escalate_after``) fired, sent by the worker whose
sweep fired it, after it is stored, at most once. The ``approval_opened`` keyword arguments (``assignees``: whom to
notify — the holder of a claimed task, every assignee, or those an escalation added), ``approval_id``,
``claimed_by`` ("" when nobody holds it) and ``reason`` (``"reminder"`` or ``"escalation"``).
``OPENWORKFLOW["APPROVAL_NOTIFY"]`` is called with them (``alerts.py``)."""

runs_pruned = Signal()
"""Retention deleted finished runs. ``count``: how many, ``workflow_name``: theirs (``sender`` too)."""


def send(signal: Signal, workflow_name: str, **kwargs: Any) -> None:
    """Send ``signal``; a receiver's exception is logged, never raised."""
    if not signal.receivers or not signal.has_listeners(workflow_name):  # the first test needs no lock
        return
    for receiver, result in signal.send_robust(workflow_name, workflow_name=workflow_name, **kwargs):
        if isinstance(result, Exception):
            logger.error("receiver %r of a django-openworkflow hook failed", receiver, exc_info=result)
