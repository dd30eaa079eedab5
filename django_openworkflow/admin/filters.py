"""The run list's filters: status, workflow, version, queue, subject, attribute and dates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .. import formatting as fmt
from ..client.listing import attribute_filters
from ..client.subjects import Subject, parse_subject
from ..definitions.flow import QUEUE_NAME
from ..definitions.payload import check_text
from ..definitions.registry import registry
from ..errors import InvalidArgument, PayloadError
from ..models import WorkflowRun
from ..store import queries
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
