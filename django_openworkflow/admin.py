"""Django admin: every run with its journal, read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import StepAttempt, WorkflowRun


class StepAttemptInline(admin.TabularInline):
    model = StepAttempt
    fk_name = "workflow_run"
    extra = 0
    can_delete = False
    ordering = ("id",)
    fields = ("step_name", "kind", "status", "started_at", "finished_at", "output", "error", "context")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    list_display = ("id", "workflow_name", "version", "status", "attempts", "created_at", "finished_at", "worker_id")
    list_filter = ("status", "workflow_name", "version", "created_at")
    search_fields = ("=id", "workflow_name", "=idempotency_key")
    ordering = ("-created_at",)
    inlines = [StepAttemptInline]
    readonly_fields = [f.name for f in WorkflowRun._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Viewing needs only the view permission; runs change through actions.
        return False
