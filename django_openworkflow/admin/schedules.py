"""The ModelAdmin for cron schedules: see them, pause and resume them, start runs now or for past ticks.

Schedules are declared in code (``@workflow(schedule=...)``) and the
workers write their rows, so nothing here adds, deletes or edits a cron
expression, time zone, input or policy: the admin pauses and resumes,
triggers a run now (an action of the list) and backfills past ticks (a
form reached from a schedule's page). The last two start runs: they need
the change permission on schedules and the add permission on runs.

The pages are read-only: the list is titled "Schedules", a schedule's page
has no Save button, every time is written one way (``2026-11-26 09:00:00
CET``, in the schedule's own time zone), and a schedule that is not paused
reads "active" rather than a red cross.

A paused schedule starts no run. Resuming starts at the first tick after
the resume, whatever the schedule's ``missed`` policy: ticks that passed
during a pause were skipped on purpose, unlike ticks missed because every
worker was down.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import lazy
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..client.schedules import BACKFILL_LIMIT, backfill_schedule, declared_schedules, next_ticks, trigger_schedule
from ..definitions.cron import ticks_after
from ..errors import InvalidArgument
from ..models import Schedule, WorkflowRun
from ..store import get_backend

FIRE_TIMES_SHOWN = 3
TIME_FORMAT = "%Y-%m-%d %H:%M:%S %Z"
_next_fire_times_title = lazy(lambda: gettext("Next %(count)d fire times") % {"count": FIRE_TIMES_SHOWN}, str)


class BackfillForm(forms.Form):
    """A range of past ticks, in the schedule's own time zone."""

    start = forms.DateTimeField(
        label=_("Start"), help_text=_("Included. In the schedule's time zone: 2026-11-20 00:00:00.")
    )
    end = forms.DateTimeField(label=_("End"), help_text=_("Excluded. In the schedule's time zone."))


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Every schedule, with its next fire times; pause and resume are the only changes."""

    list_display = (
        "name", "cron_text", "zone", "state", "in_code", "last_tick", "next_fire_times", "missed", "overlap",
    )  # fmt: skip
    search_fields = ("name",)
    actions = ("pause", "resume", "trigger_now")
    fields = readonly_fields = (
        "name", "cron_text", "timezone", "missed", "overlap", "input", "state", "in_code", "last_tick", "next_tick",
        "buffered_tick", "next_fire_times", "created", "updated", "backfill_link",
    )  # fmt: skip

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("django_openworkflow/admin.css",)}

    # -- columns: every time in TIME_FORMAT, in the schedule's own time zone --------

    @staticmethod
    def _time(row: Schedule, value: datetime | None) -> SafeString | str:
        if value is None:
            return "-"
        return format_html(
            '<span class="owf-nowrap">{}</span>', f"{value.astimezone(ZoneInfo(row.timezone)):{TIME_FORMAT}}"
        )

    @admin.display(description=_("Cron"), ordering="cron")
    def cron_text(self, row: Schedule) -> SafeString:
        return format_html('<code class="owf-nowrap">{}</code>', row.cron)

    @admin.display(description=_("time zone"), ordering="timezone")
    def zone(self, row: Schedule) -> SafeString:
        """The zone's name, which may break after its slashes (America/Argentina/Buenos_Aires is long)."""
        parts = row.timezone.split("/")
        return format_html_join(mark_safe("/<wbr>"), "{}", ((part,) for part in parts))

    @admin.display(description=_("State"), ordering="paused")
    def state(self, row: Schedule) -> SafeString | str:
        if row.paused:
            return format_html('<span class="owf-badge owf-status-parked">{}</span>', gettext("paused"))
        return gettext("active")

    @admin.display(description=_("Last tick"), ordering="last_tick_at")
    def last_tick(self, row: Schedule) -> SafeString | str:
        return self._time(row, row.last_tick_at)

    @admin.display(description=_("Next tick"), ordering="next_tick_at")
    def next_tick(self, row: Schedule) -> SafeString | str:
        return self._time(row, row.next_tick_at)

    @admin.display(description=_("Buffered tick"))
    def buffered_tick(self, row: Schedule) -> SafeString | str:
        """With overlap buffer_one: the tick whose run starts when the unfinished one ends."""
        return self._time(row, row.buffered_tick_at)

    @admin.display(description=_("Backfill"))
    def backfill_link(self, row: Schedule) -> SafeString | str:
        return format_html(
            '<a href="{}">{}</a>',
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_backfill", args=[row.pk]),
            gettext("Start the runs of past ticks…"),
        )

    @admin.display(description=_("Created"))
    def created(self, row: Schedule) -> SafeString | str:
        return self._time(row, row.created_at)

    @admin.display(description=_("Updated"))
    def updated(self, row: Schedule) -> SafeString | str:
        return self._time(row, row.updated_at)

    @admin.display(description=_next_fire_times_title())
    def next_fire_times(self, row: Schedule) -> SafeString | str:
        """Computed from the expression, in the schedule's own time zone: what a resume would give too."""
        try:
            ticks = next_ticks(row, FIRE_TIMES_SHOWN, now=timezone.now())
        except Exception as exc:  # croniter missing, a zone this machine lacks: say so, keep the page
            return gettext("cannot compute: %(error)s") % {"error": exc}
        zone = ZoneInfo(row.timezone)
        return format_html_join(
            "", '<div class="owf-nowrap">{}</div>', ((f"{tick.astimezone(zone):{TIME_FORMAT}}",) for tick in ticks)
        )

    @admin.display(description=_("In code"), boolean=True)
    def in_code(self, row: Schedule) -> bool:
        """False when no workflow of this process declares the schedule any more: it starts nothing."""
        return row.name in declared_schedules()

    # -- permissions: rows come from code and are never deleted here --------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """The list's pause and resume need it; a schedule's own page has nothing to save, so it is a view page."""
        return obj is None and super().has_change_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # Django's title, "Select schedule to change", offers to change what is read-only here.
        return super().changelist_view(request, {"title": gettext("Schedules"), **(extra_context or {})})

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- actions -------------------------------------------------------------------

    @admin.action(description=_("Pause the selected schedules"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        changed = list(queryset.filter(paused=False))
        Schedule.objects.filter(pk__in=[row.pk for row in changed]).update(paused=True, updated_at=timezone.now())
        for row in changed:
            self.log_change(request, row, "Paused the schedule (django-openworkflow)")
        self.message_user(
            request,
            gettext("Paused %(count)d schedule(s): they start no run until resumed.") % {"count": len(changed)},
        )

    @admin.action(description=_("Resume the selected schedules"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now = get_backend().now()  # the clock the workers fire by
        resumed = 0
        for row in queryset.filter(paused=True):
            following = next(ticks_after(row.cron, row.timezone, now))
            # Only if still paused: a second admin resuming at once changes nothing.
            if Schedule.objects.filter(pk=row.pk, paused=True).update(
                paused=False, next_tick_at=following, updated_at=timezone.now()
            ):
                resumed += 1
                self.log_change(request, row, f"Resumed the schedule; next tick {following.isoformat()}")
        self.message_user(
            request,
            gettext("Resumed %(count)d schedule(s): each starts again at its next tick.") % {"count": resumed},
        )

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        """Trigger now and backfill start runs: the change permission here and the add permission on runs."""
        return super().has_change_permission(request) and request.user.has_perm(
            f"{WorkflowRun._meta.app_label}.add_{WorkflowRun._meta.model_name}"
        )

    @admin.action(description=_("Start a run of the selected schedules now"), permissions=["trigger"])
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        started, refused = 0, []
        for row in queryset:
            try:
                handle = trigger_schedule(row.name)
            except InvalidArgument:  # no longer declared in code
                refused.append(row.name)
                continue
            started += 1
            self.log_change(request, row, f"Triggered a run now: {handle.id} (django-openworkflow)")
        self.message_user(
            request, gettext("Started %(count)d run(s) now, outside the schedules' cadence.") % {"count": started}
        )
        if refused:
            self.message_user(
                request,
                gettext("Not started (no workflow declares these schedules any more): %(names)s")
                % {"names": ", ".join(refused)},
                level="warning",
            )

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/backfill/",
                self.admin_site.admin_view(self.backfill_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_backfill",
            )
        ]
        return own + super().get_urls()

    def backfill_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the range form; POST: start the runs of the range's ticks (``backfill_schedule``)."""
        row = Schedule.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        if row is None:
            raise Http404(f"No schedule with id {object_id!r}.")
        if not self.has_trigger_permission(request):
            raise PermissionDenied
        zone = ZoneInfo(row.timezone)
        form = BackfillForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            # The form reads its times in the site's zone: the same wall time, in the schedule's.
            start, end = (
                value if timezone.is_naive(value) else timezone.make_naive(value)
                for value in (form.cleaned_data["start"], form.cleaned_data["end"])
            )
            try:
                done = backfill_schedule(row.name, start.replace(tzinfo=zone), end.replace(tzinfo=zone))
            except InvalidArgument as exc:
                form.add_error(None, str(exc))
            else:
                self.log_change(request, row, f"Backfilled {len(done.ticks)} tick(s), {done.created} new run(s)")
                self.message_user(
                    request,
                    gettext("Backfilled %(ticks)d tick(s) of %(name)s: %(created)d new run(s), the others had one.")
                    % {"ticks": len(done.ticks), "name": row.name, "created": done.created},
                )
                return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "media": self.media,
            "title": gettext("Backfill %(name)s") % {"name": row.name},
            "schedule": row,
            "form": form,
            "limit": BACKFILL_LIMIT,
        }
        return TemplateResponse(request, "django_openworkflow/schedule_backfill.html", context)
