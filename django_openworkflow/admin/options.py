"""The ModelAdmin for workflow runs: its URLs and views, wiring the list, the run page, the forms and the actions.

Runs change only through the actions (cancel, retry now, retry from the
failed step, re-run) and the signal form, which go through the same
operations as the client and the CLI; step attempts are never edited, and
runs are never deleted here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext

from ..client.handle import send_signal
from ..client.subjects import parse_subject
from ..errors import InvalidArgument, PayloadError, RunNotFound, SignalError
from ..formatting import short_id
from ..models import WorkflowRun
from ..store import queries, run_states
from . import changelist, erasure, filters, live
from .actions import (
    ACTIONS,
    RunAction,
    confirmation,
    perform_action,
    perform_on_matching,
    perform_rerun_from_step,
    rerun_from_step_confirmation,
)
from .dashboard import dashboard_context
from .forms import SendSignalForm, StartRunForm
from .markup import run_url
from .responses import PrintableTemplateResponse, printable_page
from .run_page import run_page
from .workers import unserved_context
from .workflow_page import workflow_context


def _list_action(run_action: RunAction) -> Any:
    """A changelist action for ``run_action`` that asks for confirmation first."""

    def action(modeladmin: WorkflowRunAdmin, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> Any:
        return modeladmin.confirm_or_perform(request, queryset, run_action)

    # The admin keys actions by function name.
    action.__name__ = f"{run_action.name}_runs"
    description = format_lazy("{}…", run_action.label)
    return admin.action(description=description, permissions=[run_action.permission])(action)


def _not_sent(name: str, exc: Exception) -> str:
    return gettext("Signal %(name)s not sent: %(error)s") % {"name": repr(name), "error": exc}


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    """Every run, newest first, with status counts, filters, search and actions."""

    list_display = changelist.COLUMNS
    list_display_links = changelist.LINKS
    list_filter = filters.FILTERS
    # The search itself is get_search_results; these only make the admin show the box.
    search_fields = ("workflow_name", "idempotency_key")
    search_help_text = changelist.SEARCH_HELP
    ordering = ("-created_at",)
    list_per_page = 50
    # A second COUNT over the whole table buys little and costs a scan per page view.
    show_full_result_count = False
    # The status counts above the list replace the filters' per-choice counts
    # (a COUNT per choice per page view).
    show_facets = admin.ShowFacets.NEVER
    actions = tuple(_list_action(action) for action in ACTIONS.values())
    change_list_template = "django_openworkflow/change_list.html"

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {
            "all": ("django_openworkflow/admin.css", "django_openworkflow/live.css")
        }

    # -- list ------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return run_states.with_error_summary(super().get_queryset(request).defer(*queries.PAYLOAD_FIELDS))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[changelist.RunChangeList]:
        return changelist.RunChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        try:
            changelist.input_pattern(search_term)
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return changelist.search(queryset, search_term), False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {
            "title": gettext("Workflow runs"),
            **live.live_context(),
            **unserved_context(request),
            **(extra_context or {}),
        }
        response = live.keep_messages(request, printable_page(super().changelist_view(request, extra)))
        context = getattr(response, "context_data", None)
        if context and "cl" in context:
            context.update(changelist.status_counts(request, context["cl"]))
            context["forget_url"] = self._forget_url(request)
        return response

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        return printable_page(super().history_view(request, object_id, extra_context))

    def _forget_url(self, request: HttpRequest) -> str:
        """The list filtered to one subject links to forgetting it, for users who may."""
        try:
            subject = parse_subject(request.GET["subject"]) if "subject" in request.GET else None
        except InvalidArgument:  # the filter says so already
            subject = None
        return erasure.forget_url(subject) if subject is not None and erasure.may_forget(request) else ""

    # -- permissions: runs change only through actions, are never deleted here --

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    # -- the run page, the action endpoint, the start form ------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<path:object_id>/action/<str:action_name>/",
                self.admin_site.admin_view(self.run_action_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_action",
            ),
            path(
                "<path:object_id>/rerun-from/",
                self.admin_site.admin_view(self.rerun_from_step_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_rerun_from",
            ),
            path(
                "<path:object_id>/signal/",
                self.admin_site.admin_view(self.send_signal_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_signal",
            ),
            path(
                "forget/",
                self.admin_site.admin_view(self.forget_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_forget",
            ),
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_dashboard",
            ),
            path(
                "workflow/<path:name>/",
                self.admin_site.admin_view(self.workflow_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_workflow",
            ),
        ]
        # Before the defaults: their "<path:object_id>/" catch-all would match ours.
        return own + super().get_urls()

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "media": self.media, **extra}

    def _allowed(self, request: HttpRequest, action: RunAction, run: WorkflowRun | None = None) -> bool:
        if action.permission == "add":
            return self.has_add_permission(request)
        return self.has_change_permission(request, run)

    def _may_rerun(self, request: HttpRequest, run: WorkflowRun) -> bool:
        rerun = ACTIONS["rerun"]
        return rerun.offered(run) and self._allowed(request, rerun, run)

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Runs finished per minute by outcome, failure rate, durations per workflow, queues now."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        context = self._context(
            request,
            title=gettext("Workflow dashboard"),
            **dashboard_context(request.GET),
            **live.live_context(),
            **unserved_context(request),
        )
        return live.keep_messages(
            request, PrintableTemplateResponse(request, "django_openworkflow/dashboard.html", context)
        )

    def forget_view(self, request: HttpRequest) -> HttpResponse:
        """Erase a subject's runs' payloads (``forget``), after a confirmation page."""
        return erasure.forget_view(request, self._context(request))

    def workflow_view(self, request: HttpRequest, name: str) -> HttpResponse:
        """One workflow: versions, schedule, runs by status, durations and failures over a range, a start form."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        page = workflow_context(name, request.GET, can_start=self.has_add_permission(request))
        context = self._context(request, title=gettext("Workflow %(name)s") % {"name": name}, **page)
        return PrintableTemplateResponse(request, "django_openworkflow/workflow_page.html", context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The run page: summary, payloads, timeline, journal and signals; read-only but for its forms."""
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        run = queries.run_with_parent(object_id)
        if run is None:
            raise Http404(f"No workflow run with id {object_id!r}.")
        return self._run_page(request, run)

    def _run_page(
        self, request: HttpRequest, run: WorkflowRun, signal_form: SendSignalForm | None = None
    ) -> HttpResponse:
        can_signal = not run.is_finished and self.has_change_permission(request, run)
        page = run_page(run, timezone.now())
        if signal_form is None and can_signal:
            # Filled in with the signal the run waits for, if it waits for one.
            signal_form = SendSignalForm(initial={"name": page["signal_wait"]} if page["signal_wait"] else None)
        context = self._context(
            request,
            **page,
            run_actions=[
                (action, action.ask(gettext("this run")))
                for action in ACTIONS.values()
                if action.offered(run) and self._allowed(request, action, run)
            ],
            signal_form=signal_form if can_signal else None,
            # "Re-run from here" in the journal: the steps a re-run can start from, for users who may re-run.
            rerun_from=page["rerun_steps"] if self._may_rerun(request, run) else set(),
            **live.live_context(finished=run.is_finished),
        )
        return live.keep_messages(
            request, PrintableTemplateResponse(request, "django_openworkflow/run_page.html", context)
        )

    def rerun_from_step_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what a re-run from ``?step=`` copies and runs again; POST (``step``): start it. Needs "add"."""
        run_id = queries.parse_run_id(object_id)
        run = WorkflowRun.objects.filter(id=run_id).first() if run_id else None
        if run is None:
            raise Http404(f"No workflow run with id {object_id!r}.")
        if not self._allowed(request, ACTIONS["rerun"], run):
            raise PermissionDenied
        if request.method == "POST":
            step = request.POST.get("step", "")
            new_id = perform_rerun_from_step(request, run, step)
            if new_id is not None:
                self.log_change(request, run, f"Re-run from step {step!r} (django-openworkflow action)")
            return HttpResponseRedirect(run_url(new_id or run.id))
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET", "POST"])
        context = self._context(request, **rerun_from_step_confirmation(run, request.GET.get("step", "")))
        return PrintableTemplateResponse(request, "django_openworkflow/rerun_from_step.html", context)

    def send_signal_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST from the run page's signal form: send a signal to this run (needs the change permission)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        run = queries.run_with_parent(object_id)
        if run is None:
            raise Http404(f"No workflow run with id {object_id!r}.")
        if not self.has_change_permission(request, run):
            raise PermissionDenied
        form = SendSignalForm(request.POST)
        if not form.is_valid():
            problems = "; ".join(
                f"{form.fields[field].label or field if field in form.fields else gettext('form')}: "
                f"{' '.join(map(str, errors))}"
                for field, errors in form.errors.items()
            )
            not_sent = gettext("Signal not sent: %(problems)s") % {"problems": problems}
            self.message_user(request, not_sent, level="error")
            return self._run_page(request, run, signal_form=form)
        name = form.cleaned_data["name"]
        try:
            delivered = send_signal(run.id, name, form.cleaned_data["json_data"], form.cleaned_data["idempotency_key"])
        except (SignalError, RunNotFound) as exc:
            self.message_user(request, _not_sent(name, exc), level="error")
        except ValueError as exc:  # PayloadError: the data cannot be stored
            form.add_error("json_data" if isinstance(exc, PayloadError) else None, str(exc))
            self.message_user(request, _not_sent(name, exc), level="error")
            return self._run_page(request, run, signal_form=form)
        else:
            self.log_change(request, run, f"Sent signal {name!r} (django-openworkflow)")
            if delivered:
                message = gettext("Signal %(name)s delivered: a waiting step took it now.")
            else:
                message = gettext(
                    "Signal %(name)s buffered: no step waits for it yet; the first matching wait will take it."
                )
            self.message_user(request, message % {"name": repr(name)})
        return HttpResponseRedirect(run_url(run.id))

    def run_action_view(self, request: HttpRequest, object_id: str, action_name: str) -> HttpResponse:
        """POST from the run page's confirmation form: apply one action to one run."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = ACTIONS.get(action_name)
        run_id = queries.parse_run_id(object_id)
        run = self.get_queryset(request).filter(id=run_id).first() if action and run_id else None
        if action is None or run is None:
            raise Http404("No such run or action.")
        if not self._allowed(request, action, run):
            raise PermissionDenied
        results = perform_action(request, action, [run.id], lambda changed: self._log(request, action, changed))
        target = results[0] if action.creates_runs and results else run.id
        return HttpResponseRedirect(run_url(target))

    def _log(self, request: HttpRequest, action: RunAction, runs: list[WorkflowRun]) -> None:
        # An audit trail in the admin's history: who canceled or retried what (one insert for all).
        LogEntry.objects.log_actions(
            user_id=request.user.pk,  # type: ignore[arg-type]  # staff only: never anonymous here
            queryset=runs,
            action_flag=CHANGE,
            change_message=f"{action.label} (django-openworkflow action)",
        )

    def confirm_or_perform(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], action: RunAction
    ) -> HttpResponse | None:
        """The list action: a confirmation page first, then the action on the runs confirmed.

        With "select all" (``select_across``), the action applies to every
        run the list's filter and search match, by chunks (``perform_on_matching``).
        """
        across = request.POST.get("select_across") == "1"

        def log(changed: list[WorkflowRun]) -> None:
            self._log(request, action, changed)

        if request.POST.get("post") == "yes":
            if not across:
                perform_action(request, action, queryset.values_list("id", flat=True), log)
                return None  # back to the list, with the report in messages
            confirmed = request.POST.get("owf_count", "")
            if perform_on_matching(
                request, action, queryset, int(confirmed) if confirmed.isascii() and confirmed.isdigit() else None, log
            ):
                return None
        context = self._context(
            request,
            **confirmation(action, queryset, across),
            select_across=across,
            # Django's action handler needs a selection even with "select all"; without it, every one selected.
            selected=request.POST.getlist("_selected_action"),
            changelist_url=request.get_full_path(),
        )
        return PrintableTemplateResponse(request, "django_openworkflow/confirm_action.html", context)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Start a run of a registered workflow (replaces the model's add form)."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        form = StartRunForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            run_id, created = form.start()
            if run_id is not None:
                run = WorkflowRun.objects.defer(*queries.PAYLOAD_FIELDS).get(id=run_id)
                if created:
                    self.log_addition(request, run, "Started from the admin.")
                    self.message_user(
                        request,
                        gettext("Started run %(id)s of %(workflow)s.")
                        % {"id": short_id(run_id), "workflow": run.workflow_name},
                    )
                else:
                    self.message_user(
                        request,
                        gettext("A run with this idempotency key already exists; nothing new was started."),
                        level="warning",
                    )
                return HttpResponseRedirect(run_url(run_id))
        context = self._context(
            request,
            title=gettext("Start a workflow run"),
            form=form,
            no_workflows=not form.fields["workflow"].choices,  # type: ignore[attr-defined]
            changelist_url=reverse("admin:django_openworkflow_workflowrun_changelist"),
        )
        return PrintableTemplateResponse(request, "django_openworkflow/start_run.html", context)
