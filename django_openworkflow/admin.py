"""Django admin for workflow runs: the run list, each run's page with its journal, actions, a start form.

Runs change only through the actions (cancel, retry now, retry from the
failed step, re-run), which call the store like the client does; step
attempts are never edited. The pieces that are not admin wiring live in
``admin_views.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, ClassVar

from django import forms
from django.contrib import admin
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html

from . import admin_views as views
from . import formatting as fmt
from .client import send_signal, start_run
from .errors import InvalidArgument, OpenWorkflowError, PayloadError, RunNotFound, SignalError, UnknownWorkflowError
from .models import WorkflowRun
from .payload import check_text
from .registry import registry
from .store import queries

CONFIRM_LISTED = 100  # runs named on a list action's confirmation page; the rest are counted


def _once_per_request(request: HttpRequest, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, at most once per request.

    The changelist builds its filters more than once per request (the status
    counts rebuild its queryset without the status filter), and each build
    asks the filters for their choices.
    """
    cache: dict[str, Any] = request.__dict__.setdefault("_owf_filter_choices", {})
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def _storable(text: str) -> bool:
    """Whether ``text`` could be stored at all: a NUL in a query is an error on PostgreSQL, not a miss."""
    try:
        check_text(text, "text")
    except PayloadError:
        return False
    return True


class StatusFilter(admin.SimpleListFilter):
    """Status, with ``parked`` (running, no worker holds it) apart from ``running``."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(status, status) for status in queries.DISPLAY_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        return queryset.filter(queries.status_q(value)) if value in queries.DISPLAY_STATUSES else queryset


class WorkflowNameFilter(admin.SimpleListFilter):
    """Workflow names present in the table (not only registered ones: old runs outlive their code)."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = _once_per_request(request, "names", queries.workflow_names)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(workflow_name=value) if _storable(value) else queryset.none()


NO_VERSION = "-"


class VersionFilter(admin.SimpleListFilter):
    """The chosen workflow's versions; shown once a workflow is chosen (versions belong to a workflow)."""

    title = "version"
    parameter_name = "version"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        chosen = request.GET.get(WorkflowNameFilter.parameter_name)
        if chosen:
            versions = _once_per_request(
                request, f"versions:{chosen}", lambda: queries.workflow_versions(chosen) if _storable(chosen) else []
            )
        else:
            # A version given without a workflow (a bookmarked URL) still filters.
            given = request.GET.get(self.parameter_name)
            versions = [None if given == NO_VERSION else given] if given else []
        return [(NO_VERSION if v is None else v, "(none)" if v is None else v) for v in versions]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        if value == NO_VERSION:
            return queryset.filter(version__isnull=True)
        return queryset.filter(version=value) if _storable(value) else queryset.none()


_LOCAL_INPUT = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


def _local_datetime_field(help_text: str) -> forms.DateTimeField:
    # A native datetime-local input: the admin's calendar widget needs JavaScript.
    return forms.DateTimeField(
        required=False,
        input_formats=_LOCAL_INPUT,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
        help_text=help_text,
    )


def workflow_choices() -> list[tuple[str, str]]:
    """Every registered (name, version) as a form choice; the value is JSON so a None version survives."""
    return [
        (json.dumps([spec.name, spec.version]), f"{spec.name} ({spec.version})" if spec.version else spec.name)
        for spec in registry.all()
    ]


class StartRunForm(forms.Form):
    """Start a run of a registered workflow: version, JSON input, schedule, deadline, idempotency key."""

    workflow = forms.ChoiceField(help_text="A workflow and version registered in this process.")
    input = forms.CharField(
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 60, "class": "owf-json-input", "spellcheck": "false"}),
        help_text="JSON; leave empty for null.",
    )
    available_at = _local_datetime_field("Start no earlier than this. Empty: now.")
    deadline_at = _local_datetime_field("Fail the run if it has not finished by then. Empty: no deadline.")
    idempotency_key = forms.CharField(
        required=False,
        max_length=255,
        help_text="Starting the same workflow with the same key again returns the first run.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["workflow"].choices = workflow_choices()  # type: ignore[attr-defined]
        zone = timezone.get_current_timezone_name()
        for name in ("available_at", "deadline_at"):
            self.fields[name].help_text = f"{self.fields[name].help_text} Times are in {zone}."

    def clean_workflow(self) -> tuple[str, str | None]:
        name, version = json.loads(self.cleaned_data["workflow"])
        return name, version

    def clean_input(self) -> Any:
        return _parse_json(self.cleaned_data["input"])

    def clean_idempotency_key(self) -> str | None:
        return _clean_text(self.cleaned_data["idempotency_key"], "The idempotency key") or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        available, deadline = data.get("available_at"), data.get("deadline_at")
        if available and deadline and deadline <= available:
            self.add_error("deadline_at", "The deadline must be after the start time.")
        return data

    def start(self) -> tuple[Any, bool]:
        """Start the run; returns (run id, created). Errors become form errors and return (None, False)."""
        name, version = self.cleaned_data["workflow"]
        key = self.cleaned_data["idempotency_key"]
        try:
            handle = start_run(
                name,
                self.cleaned_data["input"],
                version=version,
                available_at=self.cleaned_data["available_at"],
                deadline_at=self.cleaned_data["deadline_at"],
                idempotency_key=key,
            )
        except UnknownWorkflowError as exc:
            self.add_error("workflow", str(exc))
        except InvalidArgument as exc:
            # The error names its argument; the form's fields are named after them.
            self.add_error(exc.argument if exc.argument in self.fields else None, str(exc))
        except (OpenWorkflowError, ValueError, OverflowError) as exc:
            self.add_error(None, str(exc))
        else:
            return handle.id, handle.created
        return None, False


def _parse_json(text: str) -> Any:
    """``text`` as JSON (empty: null); a ValidationError saying where it breaks otherwise."""
    text = text.strip()
    if not text:
        return None
    try:
        return fmt.read_json(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            "Not valid JSON: %(problem)s (line %(line)s, column %(column)s).",
            params={"problem": exc.msg, "line": exc.lineno, "column": exc.colno},
            code="json",
        ) from None
    except ValueError as exc:  # nested too deep to read
        raise forms.ValidationError("The JSON %(problem)s.", params={"problem": exc}, code="json") from None


def _clean_text(text: str, what: str) -> str:
    """A stripped name or key; a ValidationError when no database could store it (a lone surrogate)."""
    text = text.strip()
    try:
        check_text(text, what)
    except PayloadError as exc:
        raise forms.ValidationError(str(exc), code="text") from None
    return text


class SendSignalForm(forms.Form):
    """Send a signal to one run from its page: a name, JSON data, an optional idempotency key."""

    name = forms.CharField(max_length=255, help_text="The name a wait_for_signal(...) in the workflow waits for.")
    json_data = forms.CharField(
        label="Data",
        required=False,
        initial="null",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "owf-json-input", "spellcheck": "false"}),
        help_text="JSON; leave empty for null.",
    )
    idempotency_key = forms.CharField(
        required=False, max_length=255, help_text="Sending again with the same key delivers once."
    )

    def clean_name(self) -> str:
        name = _clean_text(self.cleaned_data["name"], "The signal name")
        if not name:
            raise forms.ValidationError("A signal needs a name.", code="required")
        return name

    def clean_json_data(self) -> Any:
        return _parse_json(self.cleaned_data["json_data"])

    def clean_idempotency_key(self) -> str | None:
        return _clean_text(self.cleaned_data["idempotency_key"], "The idempotency key") or None


def _list_action(run_action: views.RunAction) -> Any:
    """A changelist action for ``run_action`` that asks for confirmation first."""

    def action(modeladmin: WorkflowRunAdmin, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> Any:
        return modeladmin.confirm_or_perform(request, queryset, run_action)

    # The admin keys actions by function name.
    action.__name__ = f"{run_action.name}_runs"
    return admin.action(description=f"{run_action.label}…", permissions=[run_action.permission])(action)


def _time(value: Any) -> str:
    if not value:
        return "-"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        fmt.format_time(value, precise=True),
        fmt.compact_time(value, timezone.now()),
    )


@admin.register(WorkflowRun)
class WorkflowRunAdmin(admin.ModelAdmin):
    """Every run, newest first, with status counts, filters, search and actions."""

    # Most telling first: on a narrow screen the last columns scroll out of view.
    list_display = (
        "run_id",
        "workflow",
        "version",
        "status_badge",
        "duration",
        "attempts",
        "created",
        "started",
        "finished",
        "worker",
    )
    list_display_links = ("run_id",)
    list_filter = (StatusFilter, WorkflowNameFilter, VersionFilter, ("created_at", admin.DateFieldListFilter))
    # The search itself is get_search_results; these only make the admin show the box.
    search_fields = ("workflow_name", "idempotency_key")
    search_help_text = "A run id (whole, or its first 8 characters), a workflow name, or an idempotency key."
    ordering = ("-created_at",)
    list_per_page = 50
    # A second COUNT over the whole table buys little and costs a scan per page view.
    show_full_result_count = False
    # The status counts above the list replace the filters' per-choice counts
    # (a COUNT per choice per page view).
    show_facets = admin.ShowFacets.NEVER
    actions = tuple(_list_action(action) for action in views.ACTIONS.values())
    change_list_template = "django_openworkflow/change_list.html"

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("django_openworkflow/admin.css",)}

    # -- list ------------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkflowRun]:
        return super().get_queryset(request).defer(*queries.PAYLOAD_FIELDS)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], search_term: str
    ) -> tuple[QuerySet[WorkflowRun], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        run_id = queries.parse_run_id(term)
        if run_id is not None:
            return queryset.filter(id=run_id), False
        condition = Q(workflow_name__icontains=term) | Q(idempotency_key=term)
        if len(term) == 8 and all(c in "0123456789abcdefABCDEF" for c in term):
            condition |= Q(id__startswith=term.lower())  # the short id the list shows
        return queryset.filter(condition), False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = views.printable_page(
            super().changelist_view(request, {"title": "Workflow runs", **(extra_context or {})})
        )
        context = getattr(response, "context_data", None)
        if context and "cl" in context:
            cl = context["cl"]
            # Counts over the list as filtered and searched, except by status,
            # so each count says what clicking it would show.
            counts = queries.status_counts(cl.get_queryset(request, exclude_parameters=[StatusFilter.parameter_name]))
            chosen = request.GET.get(StatusFilter.parameter_name)
            context["status_counts"] = [
                {
                    "status": status,
                    "count": count,
                    "url": cl.get_query_string({StatusFilter.parameter_name: status}, ["p"]),
                    "active": status == chosen,
                }
                for status, count in counts.items()
            ]
            context["all_statuses_url"] = cl.get_query_string(remove=[StatusFilter.parameter_name, "p"])
            context["status_total"] = sum(counts.values())
        return response

    @admin.display(description="run", ordering="id")
    def run_id(self, run: WorkflowRun) -> str:
        return format_html('<code title="{}">{}</code>', run.id, fmt.short_id(run.id))

    @admin.display(description="workflow", ordering="workflow_name")
    def workflow(self, run: WorkflowRun) -> str:
        return run.workflow_name

    @admin.display(description="worker", ordering="worker_id")
    def worker(self, run: WorkflowRun) -> str:
        return format_html('<code class="owf-worker">{}</code>', run.worker_id) if run.worker_id else "-"

    @admin.display(description="status", ordering="status")
    def status_badge(self, run: WorkflowRun) -> str:
        return views.status_badge(run.status, run.worker_id)

    @admin.display(description="created", ordering="created_at")
    def created(self, run: WorkflowRun) -> str:
        return _time(run.created_at)

    @admin.display(description="started", ordering="started_at")
    def started(self, run: WorkflowRun) -> str:
        return _time(run.started_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, run: WorkflowRun) -> str:
        return _time(run.finished_at)

    @admin.display(description="duration")
    def duration(self, run: WorkflowRun) -> str:
        return fmt.format_duration(fmt.elapsed(run.started_at, run.finished_at, timezone.now())) or "-"

    def history_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None) -> Any:
        return views.printable_page(super().history_view(request, object_id, extra_context))

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
                "<path:object_id>/signal/",
                self.admin_site.admin_view(self.send_signal_view),
                name=f"{self.opts.app_label}_{self.opts.model_name}_signal",
            ),
        ]
        # Before the defaults: their "<path:object_id>/" catch-all would match ours.
        return own + super().get_urls()

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, "media": self.media, **extra}

    def _allowed(self, request: HttpRequest, action: views.RunAction, run: WorkflowRun | None = None) -> bool:
        if action.permission == "add":
            return self.has_add_permission(request)
        return self.has_change_permission(request, run)

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
        now = timezone.now()
        attempts = queries.journal(run.id)
        run_end = run.finished_at if run.is_finished else None
        rows = views.journal_rows(attempts, now, day_of=run.created_at, run_end=run_end)
        headline, traceback, rest = fmt.split_error(run.error)
        pending_signals, consumed_signals = views.signal_rows(queries.run_signals(run.id), day_of=run.created_at)
        can_signal = not run.is_finished and self.has_change_permission(request, run)
        parent_step = run.parent_step_attempt
        context = self._context(
            request,
            title=f"{run.workflow_name} · {fmt.short_id(run.id)}",
            run=run,
            short_id=fmt.short_id(run.id),
            status_badge=views.status_badge(run.status, run.worker_id),
            wake_hint=fmt.wake_hint(run, now),
            executing=fmt.executing_hint(run, attempts, now),
            times={
                "created": fmt.format_time(run.created_at),
                "started": fmt.format_time(run.started_at),
                "finished": fmt.format_time(run.finished_at),
                "available": fmt.format_time(run.available_at),
                "deadline": fmt.format_time(run.deadline_at),
                "duration": fmt.format_duration(fmt.elapsed(run.started_at, run.finished_at, now)),
            },
            parent_run=parent_step.workflow_run if parent_step is not None else None,
            parent_step=parent_step,
            children=[(a.step_name, a.child_workflow_run) for a in attempts if a.child_workflow_run is not None],
            journal=rows,
            timeline=views.build_timeline(run, rows, now),
            input_json=fmt.pretty_json(run.input),
            output_json=fmt.pretty_json(run.output) if run.output is not None else "",
            error_headline=headline,
            error_traceback=traceback,
            error_rest=rest,
            run_actions=[
                (action, action.question.format(runs="this run"))
                for action in views.ACTIONS.values()
                if action.offered(run) and self._allowed(request, action, run)
            ],
            pending_signals=pending_signals,
            consumed_signals=consumed_signals,
            signal_form=(signal_form or SendSignalForm()) if can_signal else None,
        )
        return views.PrintableTemplateResponse(request, "django_openworkflow/run_page.html", context)

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
                f"{form.fields[field].label or field if field in form.fields else 'form'}: {' '.join(map(str, errors))}"
                for field, errors in form.errors.items()
            )
            self.message_user(request, f"Signal not sent: {problems}", level="error")
            return self._run_page(request, run, signal_form=form)
        name = form.cleaned_data["name"]
        try:
            delivered = send_signal(run.id, name, form.cleaned_data["json_data"], form.cleaned_data["idempotency_key"])
        except (SignalError, RunNotFound) as exc:
            self.message_user(request, f"Signal {name!r} not sent: {exc}", level="error")
        except ValueError as exc:  # PayloadError: the data cannot be stored
            form.add_error("json_data" if isinstance(exc, PayloadError) else None, str(exc))
            self.message_user(request, f"Signal {name!r} not sent: {exc}", level="error")
            return self._run_page(request, run, signal_form=form)
        else:
            self.log_change(request, run, f"Sent signal {name!r} (django-openworkflow)")
            if delivered:
                self.message_user(request, f"Signal {name!r} delivered: a waiting step took it now.")
            else:
                self.message_user(
                    request,
                    f"Signal {name!r} buffered: no step waits for it yet; the first matching wait will take it.",
                )
        return HttpResponseRedirect(views.run_url(run.id))

    def run_action_view(self, request: HttpRequest, object_id: str, action_name: str) -> HttpResponse:
        """POST from the run page's confirmation form: apply one action to one run."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = views.ACTIONS.get(action_name)
        run_id = queries.parse_run_id(object_id)
        run = self.get_queryset(request).filter(id=run_id).first() if action and run_id else None
        if action is None or run is None:
            raise Http404("No such run or action.")
        if not self._allowed(request, action, run):
            raise PermissionDenied
        results = views.perform_action(request, action, [run.id], lambda changed: self._log(request, action, changed))
        target = results[0] if action.creates_runs and results else run.id
        return HttpResponseRedirect(views.run_url(target))

    def _log(self, request: HttpRequest, action: views.RunAction, runs: list[WorkflowRun]) -> None:
        # An audit trail in the admin's history: who canceled or retried what (one insert for all).
        LogEntry.objects.log_actions(
            user_id=request.user.pk,  # type: ignore[arg-type]  # staff only: never anonymous here
            queryset=runs,
            action_flag=CHANGE,
            change_message=f"{action.label} (django-openworkflow action)",
        )

    def confirm_or_perform(
        self, request: HttpRequest, queryset: QuerySet[WorkflowRun], action: views.RunAction
    ) -> HttpResponse | None:
        """The list action: a confirmation page first, then the action on the runs confirmed."""
        if request.POST.get("post") == "yes":
            run_ids = queryset.values_list("id", flat=True)
            views.perform_action(request, action, run_ids, lambda changed: self._log(request, action, changed))
            return None  # back to the list, with the report in messages
        listed = list(queryset[:CONFIRM_LISTED])
        total = len(listed) if len(listed) < CONFIRM_LISTED else queryset.count()
        skipped = action.refusals(listed)
        context = self._context(
            request,
            title=f"{action.label}: are you sure?",
            action=action,
            action_function=f"{action.name}_runs",
            question=action.question.format(runs=f"the {views.plural(total, 'selected run')}"),
            runs=[(run, views.status_badge(run.status, run.worker_id), skipped.get(run.id, "")) for run in listed],
            more=total - len(listed),
            select_across=request.POST.get("select_across") == "1",
            changelist_url=request.get_full_path(),
        )
        return views.PrintableTemplateResponse(request, "django_openworkflow/confirm_action.html", context)

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
                    self.message_user(request, f"Started run {fmt.short_id(run_id)} of {run.workflow_name}.")
                else:
                    self.message_user(
                        request,
                        "A run with this idempotency key already exists; nothing new was started.",
                        level="warning",
                    )
                return HttpResponseRedirect(views.run_url(run_id))
        context = self._context(
            request,
            title="Start a workflow run",
            form=form,
            no_workflows=not form.fields["workflow"].choices,  # type: ignore[attr-defined]
            changelist_url=reverse("admin:django_openworkflow_workflowrun_changelist"),
        )
        return views.PrintableTemplateResponse(request, "django_openworkflow/start_run.html", context)
