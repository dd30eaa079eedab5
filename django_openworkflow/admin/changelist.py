"""The run list: its columns, search and the status counts above it (its filters: filters.py).

The columns read only what ``get_queryset`` keeps (payloads are deferred), so
a page costs a fixed number of queries however many rows it shows.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .. import formatting as fmt
from ..encryption import refuse_input_search
from ..models import StepAttempt, WorkflowRun
from ..states import DisplayStatus
from ..store import get_backend, queries, run_states
from ..store.containment import check_pattern
from . import markup
from .filters import StatusFilter


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


TAKEN_BACK_LABEL = _("taken back")
TAKEN_BACK_TITLE = _(
    "A worker lost this run's lease mid-step (it died or stalled) and another took the run back: "
    "the step was charged a failed attempt (LeaseExpired) and ran again. Its page shows which."
)


@admin.display(description=_("status"), ordering="status")
def status_badge(run: WorkflowRun) -> str:
    """The display status, with why a run retries, what it waits for, or that it waits for a concurrency place."""
    state = _state(run)
    shown = markup.badge(state.status)
    now = timezone.now()
    if state.status in (DisplayStatus.RETRYING, DisplayStatus.WAITING):
        hint = fmt.state_hint(state.status, run, state.error, state.wait, now)
        shown = format_html('{} <span class="owf-hint owf-state-hint">{}</span>', shown, hint)
    elif fmt.is_blocked(run):
        shown = format_html(
            '{} <span class="owf-hint owf-blocked" title="{}">{}</span>',
            shown,
            fmt.blocked_line(run, now),
            str(fmt.WAITING_FOR_PLACE),
        )
    if state.taken_back:
        shown = format_html(
            '{} <span class="owf-hint owf-taken-back" title="{}">{}</span>', shown, TAKEN_BACK_TITLE, TAKEN_BACK_LABEL
        )
    return shown


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
    pattern = check_pattern(pattern)
    refuse_input_search()  # an InvalidArgument, a ValueError: inputs stored encrypted cannot be searched
    return pattern


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
