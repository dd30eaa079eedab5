"""A workflow's page: its versions, its schedule, its runs by status, durations and failures over a range, a start form.

Reached from the workflow's name in the run list, on a run's page and on
the dashboard. Every count links to the runs it counts in the run list.
The figures come from :mod:`django_openworkflow.store.workflow_page` (a
fixed number of queries; percentiles exact, in SQL).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.http import Http404
from django.urls import NoReverseMatch, reverse
from django.utils.translation import gettext

from .. import formatting as fmt
from ..definitions.payload import check_text
from ..definitions.registry import WorkflowSpec, registry
from ..errors import PayloadError
from ..states import RunStatus
from ..store import get_backend, workflow_page
from ..store.dashboard import OUTCOMES
from .charts import finished_chart, outcome_label
from .dashboard import bucket_range, finished_list_url, list_url, range_choices
from .forms import StartRunForm
from .markup import run_url
from .time_range import time_range, up_to_the_second

NO_VERSION = "-"  # the run list's value for "no version" (filters.NO_VERSION)


def registered_versions(name: str) -> list[WorkflowSpec]:
    """The versions of ``name`` registered in this process, lowest first (the last is what starts by default)."""
    return [spec for spec in registry.all() if spec.name == name]


def workflow_context(name: str, params: Any, can_start: bool) -> dict[str, Any]:
    """What ``workflow_page.html`` shows of the workflow ``name``, over the range the GET ``params`` ask for.

    Raises Http404 for a name no run has and no registered workflow bears,
    or one no database could store.
    """
    try:
        check_text(name, "workflow name")
    except PayloadError:
        raise Http404("No such workflow.") from None
    specs = registered_versions(name)
    now = up_to_the_second(get_backend().now())  # whole seconds, as the list links give them
    window = time_range(params, now)
    figures = workflow_page.read(name, window.since, window.until, window.bar_minutes)
    if not specs and not figures.total:
        raise Http404(f"No workflow named {name!r}: none is registered and no run has that name.")
    mine = {"workflow": name}
    rate = figures.failure_rate
    return {
        **range_choices(window),
        "workflow_name": name,
        "figures": figures,
        "specs": [
            (spec.version, spec.queue, _list(workflow=name, version=spec.version or NO_VERSION)) for spec in specs
        ],
        "default_version": specs[-1].version if specs else None,
        "seen_versions": [
            (version, _list(workflow=name, version=version or NO_VERSION)) for version in figures.versions
        ],
        "schedule": figures.schedule,
        "schedule_url": _schedule_url(figures.schedule),
        "declared_schedule": next((spec.schedule for spec in reversed(specs) if spec.schedule), None),
        "all_runs_url": _list(**mine),
        "by_status": [
            (status, fmt.status_label(status), count, _list(workflow=name, status=status))
            for status, count in figures.by_status.items()
        ],
        "finished": [
            (outcome, outcome_label(outcome), count, finished_list_url(window, status=outcome, **mine))
            for outcome, count in figures.finished.items()
        ],
        "total_finished": sum(figures.finished.values()),
        "finished_url": finished_list_url(window, status__in=",".join(OUTCOMES), **mine),
        "failure_rate": "-" if rate is None else f"{rate * 100:.1f} %",
        "failed_url": finished_list_url(window, status=RunStatus.FAILED, **mine),
        "p50": fmt.format_duration(figures.p50) or "-",
        "p95": fmt.format_duration(figures.p95) or "-",
        "failures": [_failure(failure) for failure in figures.failures],
        "finished_chart": finished_chart(
            figures.buckets,
            window.until,
            link=lambda bucket: finished_list_url(bucket_range(bucket), status__in=",".join(OUTCOMES), **mine),
        ),
        "start_form": _start_form(specs) if can_start and specs else None,
        "start_url": reverse("admin:django_openworkflow_workflowrun_add"),
    }


def _list(**filters: str) -> str:
    return list_url(urlencode(filters))


def _schedule_url(schedule: Any) -> str:
    if schedule is None:
        return ""
    try:
        return reverse("admin:django_openworkflow_schedule_change", args=[schedule.pk])
    except NoReverseMatch:  # the schedule admin is not registered on this site
        return ""


def _failure(failure: workflow_page.Failure) -> dict[str, Any]:
    headline, step = fmt.error_cell(failure.error)
    child = isinstance(failure.error.get("child_error"), dict)
    return {
        "url": run_url(failure.run_id),
        "short_id": fmt.short_id(failure.run_id),
        "version": failure.version,
        "finished_at": fmt.format_time(failure.finished_at),
        "headline": headline or gettext("(no error recorded)"),
        "step": step,
        "in_child": child,
    }


def _start_form(specs: list[WorkflowSpec]) -> StartRunForm:
    """The admin's start form, offering only this workflow's versions, the default (highest) one chosen."""
    form = StartRunForm()
    ours = {json.dumps([spec.name, spec.version]) for spec in specs}
    choices = [choice for choice in form.fields["workflow"].choices if choice[0] in ours]  # type: ignore[attr-defined]
    form.fields["workflow"].choices = choices  # type: ignore[attr-defined]
    form.fields["workflow"].label = gettext("Version")
    form.initial["workflow"] = json.dumps([specs[-1].name, specs[-1].version])
    return form
