"""The runs (the queue and each run's state) and their step attempts (the journal)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, TypeVar

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import F, Lookup, Q
from django.utils.translation import gettext_lazy as _

from ..conf import owf_settings
from ..definitions.children import ParentClosePolicy
from ..definitions.flow import DEFAULT_QUEUE
from ..states import CLAIMABLE_STATUSES, FINISHED_STATUSES, RunStatus, StepKind, StepStatus
from .fields import ErrorField, PayloadField

_M = TypeVar("_M", bound=models.Model)

IS_PARKED = Q(status=RunStatus.RUNNING, worker_id__isnull=True)
"""Running with no worker holding it: sleeping, waiting, or backing off before a retry."""
IS_HELD = Q(status=RunStatus.RUNNING, worker_id__isnull=False)
"""Running and held by a worker right now."""


class _StatusIn(Lookup):
    """``status IN ('pending', 'running')`` with the statuses as literals (our constants), not parameters.

    Only then can SQLite's planner (and PostgreSQL's generic plans) prove
    that the partial claim index covers the query. A lookup, not a boolean
    RawSQL: MySQL would compare that with ``= 1`` and ignore its indexes.
    """

    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        column, params = compiler.compile(self.lhs)
        statuses = ", ".join(f"'{status.value}'" for status in self.rhs)
        return f"{column} IN ({statuses})", params


class WorkflowRunQuerySet(models.QuerySet["WorkflowRun"]):
    """The named subsets of runs: one definition each of "due", "parked", "held" and "finished"."""

    def claimable(self) -> WorkflowRunQuerySet:
        """Runs a worker may claim once due: pending, or running (held with a lease, or parked)."""
        return self.filter(_StatusIn(F("status"), CLAIMABLE_STATUSES))

    def due(self, now: datetime) -> WorkflowRunQuerySet:
        """Runs claimable at ``now``: new, woken, retry due, or with an expired lease."""
        return self.claimable().filter(available_at__lte=now)

    def parked(self) -> WorkflowRunQuerySet:
        """Running runs that no worker holds: sleeping, waiting, or backing off before a retry."""
        return self.filter(IS_PARKED)

    def held(self) -> WorkflowRunQuerySet:
        """Running runs a worker holds right now."""
        return self.filter(IS_HELD)

    def finished(self) -> WorkflowRunQuerySet:
        """Completed, failed or canceled runs."""
        return self.filter(status__in=FINISHED_STATUSES)


class WorkflowDatabaseManager(models.Manager[_M]):
    """``objects`` of every table here: each query goes to ``OPENWORKFLOW["DATABASE"]``, read at query time."""

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(owf_settings.database)


WorkflowRunManager = WorkflowDatabaseManager.from_queryset(WorkflowRunQuerySet)


class WorkflowRun(models.Model):
    """One execution of a workflow, from start to finish; also the work queue's row."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow_name = models.CharField(max_length=255)
    version = models.CharField(max_length=255, null=True, blank=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices(), default=RunStatus.PENDING)
    # Payloads: encrypted at rest when OPENWORKFLOW["PAYLOAD_ENCRYPTION"] is set (fields.py).
    input = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    output = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    error = ErrorField(encoder=DjangoJSONEncoder, null=True, blank=True)
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    worker_id = models.CharField(max_length=64, null=True, blank=True)
    attempts = models.PositiveIntegerField(
        default=0, help_text="Failed workflow-level attempts (claims and sleeps do not count)."
    )
    available_at = models.DateTimeField(
        help_text="When the run may next be claimed: start time, wake time, or lease end."
    )
    deadline_at = models.DateTimeField(null=True, blank=True)
    # Flow control (flow.py): where and in which order the run is claimed, and the limits it was started with.
    queue = models.CharField(max_length=64, default=DEFAULT_QUEUE)
    priority = models.SmallIntegerField(default=0, help_text="Higher first, within a queue.")
    # Set while priority aging (OPENWORKFLOW["PRIORITY_AGING"], store/aging.py) has raised ``priority``:
    # the priority the run was started with. NULL otherwise, which is nearly always.
    declared_priority = models.SmallIntegerField(
        null=True, blank=True, editable=False, help_text="The priority it was started with, while aging raised it."
    )
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)
    # In a fair queue (OPENWORKFLOW["FAIR_QUEUES"]): the run's key, and its place in line among the
    # queue's runs of its priority (store/fairness.py), set when it is started.
    fairness_key = models.CharField(max_length=255, null=True, blank=True, editable=False)
    fair_at = models.DateTimeField(null=True, blank=True, editable=False)
    concurrency_limit = models.PositiveIntegerField(null=True, blank=True)
    concurrency_counts_parked = models.BooleanField(
        default=False, help_text="Whether the run keeps its concurrency place while parked."
    )
    blocked_at = models.DateTimeField(
        null=True, blank=True, help_text="Since when the run waits for a place under its concurrency limit."
    )
    rate_key = models.CharField(max_length=255, null=True, blank=True)
    rate_limit = models.PositiveIntegerField(null=True, blank=True)
    rate_period = models.FloatField(null=True, blank=True, help_text="Seconds.")
    debounce_key = models.CharField(
        max_length=255, null=True, blank=True, help_text="Set until the run is first claimed; later starts fold in."
    )
    parent_step_attempt = models.ForeignKey(
        "StepAttempt",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="child_runs",
    )
    continued_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="continued_as",
        help_text="The run that handed over to this one (ctx.continue_as_new).",
    )
    rerun_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="reruns",
        help_text="The run this one re-runs with the same input (a re-run, or a re-run from a step).",
    )
    rerun_from_step = models.CharField(
        max_length=255,
        null=True,
        blank=True,
        help_text="The step this re-run starts from: the steps before it were copied from the run it re-runs.",
    )
    # The parent-close policy (engine/children.py): what the end of the run named by closes_with does to this one.
    parent_close_policy = models.CharField(
        max_length=16,
        choices=ParentClosePolicy.choices(),
        default=ParentClosePolicy.ABANDON,
        help_text="What happens to this child run when its parent ends.",
    )
    closes_with = models.UUIDField(
        null=True,
        blank=True,
        editable=False,
        help_text="The run whose end applies the parent-close policy: the parent (or its continue-as-new successor).",
    )
    closes_children = models.BooleanField(
        default=False, editable=False, help_text="Whether it started children that its end cancels."
    )
    cancel_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="Canceled while running: its compensations run, then it ends as canceled."
    )
    retention = models.DurationField(
        null=True,
        blank=True,
        help_text="How long the run is kept once finished, fixed at start; empty: until deleted by hand.",
    )
    # What the run is about: any model instance of the project, by its model's label and primary key
    # (client/subjects.py). Plain columns, not a foreign key: the workflow tables may live on another
    # database than the model, and the user's migrations never touch them. A deleted object leaves them.
    subject_type = models.CharField(
        max_length=200, null=True, blank=True, help_text='The subject\'s model, as "app_label.model".'
    )
    subject_id = models.CharField(
        max_length=255, null=True, blank=True, help_text="The subject's primary key, as text."
    )
    # Set when its payloads were erased (forget(), store/erasure.py): columns, not a mark inside a payload,
    # so that SQL tells an erased run even where the payloads are stored encrypted.
    erased_at = models.DateTimeField(
        null=True, blank=True, editable=False, help_text="When its payloads were erased (forget)."
    )
    erased_by = models.CharField(
        max_length=150, null=True, blank=True, editable=False, help_text="Who erased its payloads."
    )
    # The W3C trace context of the code that started the run (traceparent, tracestate), for tracing.py.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    # While parked waiting for children: the one child step whose end wakes the run early (None: any child's).
    wake_on_attempt_id = models.BigIntegerField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkflowRunManager()

    class Meta:
        db_table = "openworkflow_run"
        verbose_name = _("workflow run")
        verbose_name_plural = _("workflow runs")
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["workflow_name", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="owf_run_idempotency_key_uniq",
            ),
            # Partial: only a debounced run not claimed yet has a key, and an update that is not HOT (a
            # claim, a finish) adds an entry to every index that holds the row. MySQL has no partial
            # indexes: it keeps a plain unique index, where NULL keys are distinct (0026).
            models.UniqueConstraint(
                fields=["workflow_name", "debounce_key"],
                condition=Q(debounce_key__isnull=False),
                name="owf_run_debounce_key_uniq",
            ),
        ]
        indexes = [
            # The claim query: due runs in a claimable status, oldest first.
            models.Index(
                fields=["available_at"],
                condition=Q(status__in=["pending", "running"]),
                name="owf_run_claim_idx",
            ),
            # The claim of one queue, highest priority first.
            models.Index(
                fields=["queue", "-priority", "available_at"],
                condition=Q(status__in=["pending", "running"]),
                name="owf_run_queue_claim_idx",
            ),
            # The claim of a fair queue: highest priority first, then each run's place in line.
            models.Index(
                fields=["queue", "-priority", "fair_at", "available_at"],
                condition=Q(status__in=["pending", "running"], fair_at__isnull=False),
                name="owf_run_fair_claim_idx",
            ),
            # The last place in line of a key's waiting runs, where its next run goes.
            models.Index(
                fields=["fairness_key", "fair_at"],
                condition=Q(status="pending", fair_at__isnull=False),
                name="owf_run_fair_tail_idx",
            ),
            # The runs priority aging has raised (few), which its sweep reads again (MySQL: 0021 adds a plain one).
            models.Index(
                fields=["declared_priority"],
                condition=Q(declared_priority__isnull=False),
                name="owf_run_aged_idx",
            ),
            # Places taken under a concurrency limit, and the runs waiting for one.
            models.Index(fields=["concurrency_key", "status", "worker_id"], name="owf_run_concurrency_idx"),
            models.Index(fields=["concurrency_key", "blocked_at"], name="owf_run_blocked_idx"),
            # Starts in a rate limit's window.
            models.Index(fields=["rate_key", "started_at"], name="owf_run_rate_idx"),
            models.Index(fields=["status", "created_at"], name="owf_run_status_idx"),
            models.Index(fields=["workflow_name", "created_at"], name="owf_run_name_idx"),
            models.Index(fields=["created_at"], name="owf_run_created_idx"),
            # The admin's status counts (parked = running with no worker) as an index-only scan.
            models.Index(fields=["status", "worker_id"], name="owf_run_status_worker_idx"),
            # Retention: finished runs past their retention, one range per distinct retention.
            models.Index(fields=["retention", "finished_at"], name="owf_run_retention_idx"),
            # A parent's unfinished children to close when it ends (parent-close policy).
            models.Index(fields=["closes_with", "status"], name="owf_run_closes_with_idx"),
            # A subject's runs, newest first (runs_for, the filters by subject).
            models.Index(fields=["subject_type", "subject_id", "created_at"], name="owf_run_subject_idx"),
            # The dashboard: runs finished in the last hours.
            models.Index(fields=["finished_at"], name="owf_run_finished_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name} {self.id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_parked(self) -> bool:
        """Running with no worker holding it (the row-level twin of ``WorkflowRunQuerySet.parked``)."""
        return self.status == RunStatus.RUNNING and self.worker_id is None


class StepAttempt(models.Model):
    """One attempt of one step of a run: the journal that replay reads."""

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="step_attempts")
    step_name = models.CharField(max_length=255, help_text="The durable key, e.g. 'send:1'.")
    kind = models.CharField(max_length=16, choices=StepKind.choices())
    status = models.CharField(max_length=16, choices=StepStatus.choices())
    output = PayloadField(encoder=DjangoJSONEncoder, null=True, blank=True)
    error = ErrorField(encoder=DjangoJSONEncoder, null=True, blank=True)
    # In clear: sleep times, child ids, the names and match patterns of waits (matched in SQL).
    context = models.JSONField(
        encoder=DjangoJSONEncoder,
        null=True,
        blank=True,
        help_text="Kind-specific state: a sleep's resume time, a child run's id.",
    )
    child_workflow_run = models.ForeignKey(
        WorkflowRun,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    copied_from = models.BigIntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="In a re-run from a step: the id of the attempt of the source run this row copies.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_step_attempt"
        verbose_name = _("step attempt")
        verbose_name_plural = _("step attempts")
        ordering = ["workflow_run", "id"]
        indexes = [
            models.Index(fields=["workflow_run", "created_at"], name="owf_step_run_idx"),
            # Open waits, found by senders of signals and events.
            models.Index(fields=["kind"], condition=Q(status="running"), name="owf_step_open_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.step_name} ({self.kind}, {self.status})"
