"""What operators act on beside runs: cron schedules, the workers' heartbeat rows and paused queues."""

from __future__ import annotations

from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.translation import gettext_lazy as _

from .runs import WorkflowDatabaseManager


class Schedule(models.Model):
    """A cron schedule of a workflow: declared in code, paused and resumed in the admin.

    Workers start the run of each tick with the tick's time in its
    idempotency key, so any number of them start it exactly once.
    """

    name = models.CharField(verbose_name=_("name"), max_length=255, unique=True, help_text="The workflow's name.")
    cron = models.CharField(verbose_name=_("cron"), max_length=255)
    timezone = models.CharField(verbose_name=_("time zone"), max_length=64)
    missed = models.CharField(verbose_name=_("missed ticks"), max_length=16, default="latest")
    overlap = models.CharField(
        verbose_name=_("overlap"),
        max_length=16,
        default="allow_all",
        help_text=_("What a tick does while a run of the schedule is unfinished."),
    )
    input = models.JSONField(verbose_name=_("input"), encoder=DjangoJSONEncoder, null=True, blank=True)
    paused = models.BooleanField(verbose_name=_("paused"), default=False)
    last_tick_at = models.DateTimeField(
        verbose_name=_("last tick at"),
        null=True,
        blank=True,
        help_text="The latest tick a run was started for (or the schedule began).",
    )
    next_tick_at = models.DateTimeField(verbose_name=_("next tick at"), null=True, blank=True)
    buffered_tick_at = models.DateTimeField(
        verbose_name=_("buffered tick"),
        null=True,
        blank=True,
        help_text=_("With overlap buffer_one: the tick whose run starts when the unfinished one ends."),
    )
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(verbose_name=_("updated at"), auto_now=True)

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_schedule"
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.timezone})"


class WorkerProcess(models.Model):
    """A ``runworkflows`` worker's heartbeat row: written at its start, at each heartbeat, and when it stops.

    Live while ``last_seen_at`` is within a few heartbeats (``store/workers.py``
    says how many); rows of workers that stopped or died are kept for a while
    so that the admin shows what went away, then pruned by the workers.
    """

    worker_id = models.CharField(verbose_name=_("worker id"), max_length=64, unique=True)
    host = models.CharField(verbose_name=_("host"), max_length=255)
    pid = models.IntegerField(verbose_name=_("pid"))
    version = models.CharField(verbose_name=_("version"), max_length=64, help_text=_("django-openworkflow's."))
    queues = models.JSONField(verbose_name=_("queues"), default=list, help_text=_('The queues it serves; "*": all.'))
    slots_busy = models.IntegerField(verbose_name=_("busy slots"), default=0)
    slots_total = models.IntegerField(verbose_name=_("slots"), default=0)
    heartbeat_seconds = models.FloatField(verbose_name=_("heartbeat"), help_text=_("Seconds between heartbeats."))
    started_at = models.DateTimeField(verbose_name=_("started at"))
    last_seen_at = models.DateTimeField(verbose_name=_("last seen at"), db_index=True)
    stopped_at = models.DateTimeField(
        verbose_name=_("stopped at"), null=True, blank=True, help_text=_("Set when it stopped cleanly.")
    )

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_worker"
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        ordering = ["-last_seen_at"]

    def __str__(self) -> str:
        return self.worker_id


class QueueState(models.Model):
    """A queue's persisted state: whether it is paused. Queues without a row are not paused."""

    name = models.CharField(verbose_name=_("queue"), max_length=64, unique=True)
    paused = models.BooleanField(verbose_name=_("paused"), default=False)
    changed_at = models.DateTimeField(verbose_name=_("changed at"))
    changed_by = models.CharField(verbose_name=_("changed by"), max_length=255, blank=True, default="")

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_queue"
        verbose_name = _("queue")
        verbose_name_plural = _("queues")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
