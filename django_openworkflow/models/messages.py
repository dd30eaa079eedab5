"""What runs wait for: the signals sent to one run, the events any run may wait for, and the gates."""

from __future__ import annotations

from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from .fields import PayloadField
from .runs import StepAttempt, WorkflowDatabaseManager, WorkflowRun


class Signal(models.Model):
    """A message sent to one run; buffered until a matching wait consumes it (FIFO per name)."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="signals")
    name = models.CharField(max_length=255)
    data = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    consumed_by = models.ForeignKey(StepAttempt, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    consumed_at = models.DateTimeField(null=True, blank=True)

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_signal"
        verbose_name = _("signal")
        verbose_name_plural = _("signals")
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_run", "name", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="owf_signal_idempotency_key_uniq",
            )
        ]
        indexes = [models.Index(fields=["workflow_run", "name", "id"], name="owf_signal_run_name_idx")]

    def __str__(self) -> str:
        return f"signal {self.name} to {self.workflow_run_id}"


class Event(models.Model):
    """A broadcast event; it wakes every run waiting for its type with a matching pattern."""

    id = models.BigAutoField(primary_key=True)
    event_type = models.CharField(max_length=255)
    payload = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    woke = models.PositiveIntegerField(default=0, help_text="How many waiting runs it woke.")
    created_at = models.DateTimeField(auto_now_add=True)

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_event"
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["event_type", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="owf_event_idempotency_key_uniq",
            )
        ]
        indexes = [models.Index(fields=["event_type", "created_at"], name="owf_event_type_idx")]

    def __str__(self) -> str:
        return f"event {self.event_type} #{self.id}"


class Gate(models.Model):
    """One row per limit key, locked by claims that count its places (where there are no advisory locks)."""

    name = models.CharField(max_length=64, primary_key=True, help_text="A hash of the limit's kind and key.")

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_gate"
        verbose_name = _("gate")
        verbose_name_plural = _("gates")

    def __str__(self) -> str:
        return self.name
