"""Human tasks: a run waiting for a person's decision (``ctx.wait_for_approval``) or a form
(``ctx.wait_for_input``), listed in the admin's inbox."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from .fields import PayloadField, PayloadTextField
from .runs import StepAttempt, WorkflowDatabaseManager, WorkflowRun


class ApprovalStatus(models.TextChoices):
    OPEN = "open", _("open")
    APPROVED = "approved", _("approved")
    REJECTED = "rejected", _("rejected")
    SUBMITTED = "submitted", _("submitted")
    TIMED_OUT = "timed_out", _("timed out")


class Approval(models.Model):
    """One human task a run waits for: who may decide it, and the decision once taken.

    A yes/no approval, or, when ``form`` names a Django form, a task that
    asks for that form's data (``ctx.wait_for_input``): ``form_fields``
    holds the class of each field when the task opened (a submission
    against a form changed since is refused), ``initial`` the form's
    initial data, ``due_at`` when it is due (shown; it closes nothing).

    A yes/no approval may need ``required`` approvals from distinct people
    (sign-off by several): ``signoffs`` holds those given so far
    (``{"by", "at", "comment"}``), and the decision is delivered with the
    last one needed, or with the first rejection. ``excluded`` names the
    users who may not decide it whatever their groups or permissions
    (segregation of duties).

    Who works on it: one assignee may claim it (``claimed_by``, since
    ``claimed_at``); while claimed, only they may decide or submit it. A
    user with the ``reassign_approval`` permission may release or reassign
    it. ``activity`` lists every claim, release, reassignment, reminder,
    escalation and decision (``{"action", "by", "at"}``, and ``"to"`` for a
    reassignment or an escalation), oldest first.

    Its timers, fired by the workers' task-timer sweep (``store/task_timers.py``):
    ``next_remind_at`` (then every ``remind_every``) re-notifies the
    assignees; ``escalate_at`` adds the ``escalate_to`` assignees and
    notifies them once (``escalated_at``).

    Written with the run's signal wait, in the same fenced transaction; one
    per (run, step key). The assignees are data (usernames or user ids, group
    names, permissions ``"app_label.codename"``), resolved against
    ``django.contrib.auth`` when someone decides: the workflow tables may live
    on another database than the users. ``decided_by`` is a username, for the
    same reason.
    """

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="approvals")
    attempt = models.ForeignKey(StepAttempt, on_delete=models.CASCADE, related_name="+")
    step_key = models.CharField(max_length=255)
    name = models.CharField(max_length=255)
    details = PayloadTextField(blank=True, default="")
    assignees = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=ApprovalStatus.choices, default=ApprovalStatus.OPEN)
    created_at = models.DateTimeField()
    timeout_at = models.DateTimeField()
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = PayloadTextField(blank=True, default="")
    form = models.CharField(max_length=255, blank=True, default="")
    form_fields = models.JSONField(default=dict, blank=True)
    initial = PayloadField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    required = models.PositiveSmallIntegerField(default=1)
    excluded = models.JSONField(default=list, blank=True)
    signoffs = PayloadField(default=list, blank=True)  # their comments are payloads
    claimed_by = models.CharField(max_length=150, blank=True, default="")
    claimed_at = models.DateTimeField(null=True, blank=True)
    activity = models.JSONField(default=list, blank=True)
    remind_every = models.DurationField(null=True, blank=True)
    next_remind_at = models.DateTimeField(null=True, blank=True)
    escalate_at = models.DateTimeField(null=True, blank=True)
    escalate_to = models.JSONField(default=dict, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_approval"
        verbose_name = _("approval")
        verbose_name_plural = _("inbox")
        ordering = ["id"]
        permissions = [("reassign_approval", "Can release and reassign any human task")]
        constraints = [
            models.UniqueConstraint(fields=["workflow_run", "step_key"], name="owf_approval_run_step_uniq"),
        ]
        indexes = [models.Index(fields=["status", "id"], name="owf_approval_status_idx")]

    def __str__(self) -> str:
        return f"{'task' if self.form else 'approval'} {self.name} of {self.workflow_run_id}"
