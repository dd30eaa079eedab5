"""The run list: its columns, filters, search and the status counts above it.

The columns read only what ``get_queryset`` keeps (payloads are deferred), so
a page costs a fixed number of queries however many rows it shows.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .. import formatting as fmt
from ..client.listing import attribute_filters
from ..client.subjects import Subject, parse_subject
from ..definitions.flow import QUEUE_NAME
from ..definitions.payload import check_text
from ..definitions.registry import registry
from ..errors import InvalidArgument, PayloadError
from ..models import StepAttempt, WorkflowRun
from ..states import DisplayStatus
from ..store import get_backend, queries, run_states
from ..store.containment import check_pattern
from . import markup
from .date_range import CreatedRangeFilter, FinishedRangeFilter


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
    """The display status: ``running`` (held by a worker) apart from ``retrying``, ``waiting`` and ``parked``."""

    title = _("status")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(status, fmt.status_label(status)) for status in queries.DISPLAY_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        return queryset.filter(queries.status_q(value)) if value in queries.DISPLAY_STATUSES else queryset


class WorkflowNameFilter(admin.SimpleListFilter):
    """Workflow names present in the table (not only registered ones: old runs outlive their code)."""

    title = _("workflow")
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names, _ = _once_per_request(request, "names and queues", queries.workflow_names_and_queues)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(workflow_name=value) if _storable(value) else queryset.none()


NO_VERSION = "-"


class VersionFilter(admin.SimpleListFilter):
    """The chosen workflow's versions; shown once a workflow is chosen (versions belong to a workflow)."""

    title = _("version")
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
        return [(NO_VERSION if v is None else v, gettext("(none)") if v is None else v) for v in versions]

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        if value == NO_VERSION:
            return queryset.filter(version__isnull=True)
        return queryset.filter(version=value) if _storable(value) else queryset.none()


class QueueFilter(admin.SimpleListFilter):
    """The queues in use: those unfinished runs wait in and those registered workflows declare.

    Read through the claim's index (one probe per queue); a queue only
    finished runs remember is not offered, but ``?queue=`` still filters by
    it. Shown once there is more than one queue to choose from.
    """

    title = _("queue")
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        _, waited_in = _once_per_request(request, "names and queues", queries.workflow_names_and_queues)
        queues = sorted(set(waited_in) | {spec.queue for spec in registry.all()})
        given = request.GET.get(self.parameter_name)
        if given and given not in queues:
            queues.append(given)  # a bookmarked URL still shows what it filters by
        return [(queue, queue) for queue in queues]

    def has_output(self) -> bool:
        return len(self.lookup_choices) > 1 or self.value() is not None

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(queue=value) if QUEUE_NAME.match(value) else queryset.none()


class SubjectFilter(admin.SimpleListFilter):
    """The runs of one object, ``?subject=app_label.model:pk``: the link an object's runs section gives.

    No choices to offer (any object of the project may be one): shown only
    while it filters. A subject that names no installed model or no primary
    key of it shows no runs and says why, once, above the list.
    """

    title = _("subject")
    parameter_name = "subject"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        given = request.GET.get(self.parameter_name)
        return [(given, given)] if given else []

    def has_output(self) -> bool:
        return self.value() is not None

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        value = self.value()
        if not value:
            return queryset
        subject = _once_per_request(request, f"subject:{value}", lambda: _subject(request, value))
        if subject is None:
            return queryset.none()
        return queryset.filter(subject_type=subject.type, subject_id=subject.id)


def _subject(request: HttpRequest, value: str) -> Subject | None:
    try:
        return parse_subject(value)
    except InvalidArgument as exc:
        messages.error(request, gettext("No runs shown for this subject: %(error)s") % {"error": exc})
        return None


class AttributeFilter(admin.ListFilter):
    """Runs by typed attribute: ``?attribute=region=eu&attribute=amount__gte=10``, as the API and the CLI take them.

    Each value is ``NAME[__LOOKUP]=VALUE``, compared as the attribute's
    declared type (``definitions/attributes.py``); all must match. The
    sidebar lists the active ones, each with a link that drops it, and a
    small GET form adds one (its input suggests the declared names). A
    filter that cannot be read shows no runs and says why, once.
    """

    title = _("attribute")
    parameter_name = "attribute"
    template = "django_openworkflow/attribute_filter.html"

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        given = params.pop(self.parameter_name, [])
        self.given = [str(text) for text in (given if isinstance(given, list) else [given]) if str(text).strip()]
        if self.given:
            self.used_parameters[self.parameter_name] = self.given
        self.workflow = request.GET.get(WorkflowNameFilter.parameter_name) or None

    def expected_parameters(self) -> list[str | None]:
        return [self.parameter_name]

    def has_output(self) -> bool:
        return bool(self.given) or bool(_once_per_request(self.request, "attributes", registry.attribute_names))

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        if not self.given:
            return queryset
        conditions = _once_per_request(
            request, f"attributes:{self.workflow}:{self.given}", lambda: _attribute_conditions(request, self)
        )
        if conditions is None:
            return queryset.none()
        return queries.RunFilter(attributes=conditions).apply(queryset)

    def choices(self, changelist: Any) -> Any:
        hidden = [
            (name, value)
            for name, values in changelist.filter_params.items()
            if name != "p"
            for value in (values if isinstance(values, list) else [values])
        ]
        yield {
            "active": [
                (text, _without(changelist, self.parameter_name, self.given, index))
                for index, text in enumerate(self.given)
            ],
            "hidden": hidden,
            "suggestions": _once_per_request(self.request, "attributes", registry.attribute_names),
            "parameter": self.parameter_name,
        }


def _without(changelist: Any, parameter: str, given: list[str], index: int) -> str:
    """The run list's URL without the ``index``-th attribute filter (and back to its first page)."""
    rest = urlencode([(parameter, text) for text in given[:index] + given[index + 1 :]])
    query = changelist.get_query_string(remove=[parameter, "p"])
    return f"{query}&{rest}" if rest and query != "?" else query + rest


def _attribute_conditions(request: HttpRequest, found: AttributeFilter) -> Any:
    try:
        filters = attribute_filters(found.given, gettext("attribute"))
        return registry.attribute_conditions(filters, found.workflow, text=True)
    except InvalidArgument as exc:
        messages.error(request, gettext("No runs shown for this attribute filter: %(error)s") % {"error": exc})
        return None


class CreatedFilter(admin.DateFieldListFilter):
    """Django's date filter on ``created_at``, titled in the user's language (the field has no verbose name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.title = gettext("created")


FILTERS = (
    StatusFilter,
    WorkflowNameFilter,
    VersionFilter,
    QueueFilter,
    SubjectFilter,
    AttributeFilter,
    ("created_at", CreatedFilter),
    CreatedRangeFilter,
    FinishedRangeFilter,
)


# -- columns ------------------------------------------------------------------


def _time(value: Any) -> str:
    if not value:
        return "-"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        fmt.format_time(value, precise=True),
        fmt.compact_time(value, timezone.now()),
    )


@admin.display(description=_("run"), ordering="id")
def run_id(run: WorkflowRun) -> str:
    return format_html('<code title="{}">{}</code>', run.id, fmt.short_id(run.id))


@admin.display(description=_("workflow"), ordering="workflow_name")
def workflow(run: WorkflowRun) -> str:
    """The name, a link to the workflow's page."""
    return markup.workflow_link(run.workflow_name)


@admin.display(description=_("version"), ordering="version")
def version(run: WorkflowRun) -> str:
    return run.version or "-"


class RunChangeList(ChangeList):
    """The admin's change list, which also reads the open waits of the page's parked runs (one query)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        runs = list(self.result_list)
        states = run_states.states_of(runs)
        for run in runs:
            run._owf_state = states[run.id]  # read by the status and error columns
        self.result_list = runs


def _state(run: WorkflowRun) -> run_states.RunState:
    # RunChangeList sets it on the page's runs; a run shown otherwise reads its own (one query if parked).
    state = getattr(run, "_owf_state", None)
    return state if state is not None else run_states.state_of(run)


@admin.display(description=_("status"), ordering="status")
def status_badge(run: WorkflowRun) -> str:
    """The display status, with why a run retries, what it waits for, or that it waits for a concurrency place."""
    state = _state(run)
    badge = markup.badge(state.status)
    now = timezone.now()
    if state.status in (DisplayStatus.RETRYING, DisplayStatus.WAITING):
        hint = fmt.state_hint(state.status, run, state.error, state.wait, now)
        return format_html('{} <span class="owf-hint owf-state-hint">{}</span>', badge, hint)
    if not fmt.is_blocked(run):
        return badge
    return format_html(
        '{} <span class="owf-hint owf-blocked" title="{}">{}</span>',
        badge,
        fmt.blocked_line(run, now),
        str(fmt.WAITING_FOR_PLACE),
    )


@admin.display(description=_("error"))
def error(run: WorkflowRun) -> str:
    """A failed run's error (or a retrying run's last one): ``Type: message``, truncated, and the step."""
    state = _state(run)
    if state.status not in (DisplayStatus.FAILED, DisplayStatus.RETRYING):
        return ""
    headline, step = fmt.error_cell(state.error)
    if not headline:
        return ""
    child = isinstance((state.error or {}).get("child_error"), dict)
    return format_html(
        '<span class="owf-error-cell">{}</span>{}',
        headline,
        format_html(
            ' <span class="owf-hint">{} <code>{}</code></span>',
            gettext("in a child of step") if child else gettext("step"),
            step,
        )
        if step
        else "",
    )


@admin.display(description=_("queue"), ordering="queue")
def queue(run: WorkflowRun) -> str:
    """The queue, and the priority when it is not the default 0 (and what it was declared, once aged)."""
    if not run.priority and run.declared_priority is None:
        return format_html('<code class="owf-queue">{}</code>', run.queue)
    label = gettext("priority %(priority)s") % {"priority": run.priority}
    if run.declared_priority is not None:
        label = gettext("priority %(priority)s (aged from %(declared)s)") % {
            "priority": run.priority,
            "declared": run.declared_priority,
        }
    return format_html(
        '<code class="owf-queue">{}</code> <span class="owf-hint" title="{}">{}</span>',
        run.queue,
        gettext("Priority: higher first within the queue"),
        label,
    )


@admin.display(description=_("attempts"), ordering="attempts")
def attempts(run: WorkflowRun) -> str:
    """Workflow-level attempts made, the current one included (claims, sleeps and step retries do not count)."""
    return str(fmt.workflow_attempts(run))


@admin.display(description=_("duration"))
def duration(run: WorkflowRun) -> str:
    return fmt.format_duration(fmt.elapsed(run.started_at, run.finished_at, timezone.now())) or "-"


@admin.display(description=_("created"), ordering="created_at")
def created(run: WorkflowRun) -> str:
    return _time(run.created_at)


@admin.display(description=_("finished"), ordering="finished_at")
def finished(run: WorkflowRun) -> str:
    return _time(run.finished_at)


@admin.display(description=_("worker"), ordering="worker_id")
def worker(run: WorkflowRun) -> str:
    if not run.worker_id:
        return "-"
    # host:pid:suffix may break after each colon in a narrow list.
    parts = format_html_join(mark_safe(":<wbr>"), "{}", ((part,) for part in run.worker_id.split(":")))
    return format_html('<code class="owf-worker">{}</code>', parts)


# Most telling first: on a narrow screen the last columns scroll out of view.
COLUMNS = (
    run_id,
    workflow,
    version,
    status_badge,
    error,
    queue,
    duration,
    attempts,
    created,
    finished,
    worker,
)
"""The list's columns. When a run started is on its page, and in its duration here: the list fits 1400 px."""
LINKS = (run_id,)


# -- search and status counts ---------------------------------------------------

SEARCH_HELP = _(
    "A run id (whole, or its first 8 characters), a workflow name, an idempotency key, a queue,"
    " a concurrency or rate limit key, a step name, words of an error's type or message,"
    ' or a JSON object the input contains, such as {"customer": 42}.'
)


def input_pattern(term: str) -> dict[str, Any] | None:
    """The JSON object a search term is, checked; None when it is not meant as one (does not start with ``{``).

    Raises ValueError saying what is wrong with a term that starts with ``{`` but is not a usable object.
    """
    term = term.strip()
    if not term.startswith("{"):
        return None
    try:
        pattern = json.loads(term)
    except ValueError as exc:
        raise ValueError(gettext("The search is not valid JSON: %(error)s") % {"error": exc}) from None
    return check_pattern(pattern)


def search(queryset: QuerySet[WorkflowRun], term: str) -> QuerySet[WorkflowRun]:
    """Runs with ``term`` as their id (whole or short), in their workflow name or error, or as a key, queue or step.

    Keys, queues and step names match exactly (``charge/42``, ``send:1``, as
    the run page shows them); the error's type and message (and a failed
    child's) contain the term, whatever its case.
    A JSON object finds the runs whose input contains it (``{"customer": 42}``);
    one that cannot be used finds nothing (``get_search_results`` says why).
    """
    term = term.strip()
    if not term:
        return queryset
    try:
        pattern = input_pattern(term)
    except ValueError:
        return queryset.none()
    if pattern is not None:
        return get_backend().input_containing(queryset, pattern)
    whole_id = queries.parse_run_id(term)
    if whole_id is not None:
        return queryset.filter(id=whole_id)
    condition = (
        Q(workflow_name__icontains=term)
        | Q(idempotency_key=term)
        | Q(queue=term)
        | Q(concurrency_key=term)
        | Q(rate_key=term)
        | Q(error__type__icontains=term)
        | Q(error__message__icontains=term)
        | Q(error__child_error__message__icontains=term)
        | Q(error__step=term)
        | Q(id__in=StepAttempt.objects.filter(step_name=term).values("workflow_run_id"))
    )
    if len(term) == 8 and all(c in "0123456789abcdefABCDEF" for c in term):
        condition |= Q(id__startswith=term.lower())  # the short id the list shows
    return queryset.filter(condition)


def status_counts(request: HttpRequest, cl: ChangeList) -> dict[str, Any]:
    """The counts above the list, each a link to that status; for the change list template."""
    # Over the list as filtered and searched, except by status, so each count says what clicking it would show.
    counts = queries.status_counts(cl.get_queryset(request, exclude_parameters=[StatusFilter.parameter_name]))
    chosen = request.GET.get(StatusFilter.parameter_name)
    return {
        "status_counts": [
            {
                "status": status,
                "label": fmt.status_label(status),
                "count": count,
                "url": cl.get_query_string({StatusFilter.parameter_name: status}, ["p"]),
                "active": status == chosen,
            }
            for status, count in counts.items()
        ],
        "all_statuses_url": cl.get_query_string(remove=[StatusFilter.parameter_name, "p"]),
        "status_total": sum(counts.values()),
    }
