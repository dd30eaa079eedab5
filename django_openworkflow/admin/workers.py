"""The Workers page: the workers' heartbeat rows, the queues with who serves them, pause and resume.

The workers write their rows (``store/workers.py``); nothing here adds,
edits or deletes one. Above the list, every queue in use with its due and
running runs, whether it is paused and the live workers that serve it, and
a Pause or Resume button (a POST form with the CSRF token) for users who
may change workflow runs. Seeing the page takes the permission to view
workflow runs (or the model's own view permission), as the API's ``GET
workers`` does.

:func:`unserved_context` is the warning the dashboard and the run list show
too: runs are due in a queue that is not paused and that no live worker serves.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from .. import formatting as fmt
from ..definitions.registry import registry
from ..errors import InvalidArgument
from ..models import WorkerProcess
from ..store import workers

RUNS_VIEW = ("django_openworkflow.view_workflowrun", "django_openworkflow.change_workflowrun")
RUNS_CHANGE = "django_openworkflow.change_workflowrun"
STATE_CLASSES = {workers.LIVE: "completed", workers.DEAD: "failed", workers.STOPPED: "canceled"}
"""The status colour each worker state borrows (admin.css)."""


def _declared() -> list[str]:
    return [spec.queue for spec in registry.all()]


def _db_now(row: WorkerProcess) -> datetime:
    """The database's time, read with the row (``get_queryset``)."""
    return row.db_now  # type: ignore[attr-defined]


def unserved_context(request: HttpRequest) -> dict[str, Any]:
    """For the dashboard and the run list: the unserved queues, and the Workers page's URL."""
    return {
        "unserved_queues": workers.unserved_queues(),
        "workers_url": reverse("admin:django_openworkflow_workerprocess_changelist"),
    }


@admin.register(WorkerProcess)
class WorkerProcessAdmin(admin.ModelAdmin):
    """Every worker row, newest seen first, under the queues and their state."""

    list_display = ("worker_id", "state", "host", "pid", "version", "queue_list", "slots", "started", "last_seen")
    list_display_links = None
    search_fields = ("worker_id", "host")
    ordering = ("-last_seen_at",)
    list_per_page = 100
    change_list_template = "django_openworkflow/workers.html"

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("django_openworkflow/admin.css",)}

    # -- columns ---------------------------------------------------------------------

    @admin.display(description=_("State"))
    def state(self, row: WorkerProcess) -> SafeString:
        state = workers.state_of(row, _db_now(row))
        labels = {workers.LIVE: gettext("live"), workers.DEAD: gettext("dead"), workers.STOPPED: gettext("stopped")}
        return format_html(
            '<span class="owf-badge owf-status-{} owf-worker-{}">{}</span>', STATE_CLASSES[state], state, labels[state]
        )

    @admin.display(description=_("Queues"))
    def queue_list(self, row: WorkerProcess) -> str:
        return ", ".join(str(queue) for queue in row.queues or []) or "-"

    @admin.display(description=_("Slots busy"))
    def slots(self, row: WorkerProcess) -> str:
        return workers.slots_label(row.slots_busy, row.slots_total, workers.state_of(row, _db_now(row)))

    @admin.display(description=pgettext_lazy("worker", "Started"), ordering="started_at")
    def started(self, row: WorkerProcess) -> SafeString:
        return format_html('<span class="owf-nowrap">{}</span>', fmt.format_time(row.started_at))

    @admin.display(description=_("Last seen"), ordering="last_seen_at")
    def last_seen(self, row: WorkerProcess) -> SafeString:
        ago = gettext("%(duration)s ago") % {"duration": fmt.format_duration(_db_now(row) - row.last_seen_at)}
        return format_html('<span class="owf-nowrap" title="{}">{}</span>', fmt.format_time(row.last_seen_at), ago)

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerProcess]:
        # The database's clock, which the workers' rows are written by (the admin is shared by threads:
        # the time goes with the rows, never on self).
        return super().get_queryset(request).annotate(db_now=Now())

    # -- permissions: rows come from the workers ------------------------------------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return super().has_view_permission(request, obj) or any(user.has_perm(name) for name in RUNS_VIEW)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- the page --------------------------------------------------------------------------

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        overview = workers.queue_overview(_declared())
        extra = {
            "title": gettext("Workers"),
            "queues": overview,
            "unserved_queues": [queue for queue in overview if queue.unserved],
            "can_pause": request.user.has_perm(RUNS_CHANGE),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra)

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "queue/<str:name>/<str:action>/",
                self.admin_site.admin_view(self.queue_action_view),
                name="django_openworkflow_workerprocess_queue",
            )
        ]
        return own + super().get_urls()

    def queue_action_view(self, request: HttpRequest, name: str, action: str) -> HttpResponse:
        """POST from the queue table's buttons: pause or resume the queue ``name``."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if action not in ("pause", "resume") or not request.user.has_perm(RUNS_CHANGE):
            raise PermissionDenied
        pause = action == "pause"
        try:
            changed = workers.set_paused(name, pause, f"admin: {request.user.get_username()}")
        except InvalidArgument as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            if not changed:
                said = (
                    gettext("Queue %(name)s was already paused.")
                    if pause
                    else gettext("Queue %(name)s was not paused.")
                )
            elif pause:
                said = gettext("Queue %(name)s paused: workers claim none of its runs from their next heartbeat.")
            else:
                said = gettext("Queue %(name)s resumed: workers claim its runs again from their next heartbeat.")
            self.message_user(request, said % {"name": name})
        return HttpResponseRedirect(reverse("admin:django_openworkflow_workerprocess_changelist"))
