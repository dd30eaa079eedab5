"""What a run tells while it works: the latest value of each key it published, and the chunks of its streams."""

from __future__ import annotations

from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.translation import gettext_lazy as _

from .fields import PayloadField
from .runs import WorkflowDatabaseManager, WorkflowRun


class PublishedValue(models.Model):
    """The latest value a run published under a key (``ctx.publish``); deleted with its run."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="published_values")
    key = models.CharField(max_length=255)
    value = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    position = models.PositiveIntegerField(
        help_text="Where the publish stands in the run's execution; a replay's earlier position replaces nothing."
    )
    updated_at = models.DateTimeField()

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_published_value"
        verbose_name = _("published value")
        verbose_name_plural = _("published values")
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["workflow_run", "key"], name="owf_published_run_key_uniq")]

    def __str__(self) -> str:
        return f"{self.key} of {self.workflow_run_id}"


class StreamChunk(models.Model):
    """One chunk of a run's stream (``ctx.stream(name).write``), at its offset; deleted with its run."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="stream_chunks")
    stream = models.CharField(max_length=255)
    offset = models.PositiveIntegerField(help_text="The chunk's place in its stream, from 0.")
    data = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    created_at = models.DateTimeField()

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_stream_chunk"
        verbose_name = _("stream chunk")
        verbose_name_plural = _("stream chunks")
        ordering = ["stream", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["workflow_run", "stream", "offset"], name="owf_stream_chunk_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.stream}[{self.offset}] of {self.workflow_run_id}"
