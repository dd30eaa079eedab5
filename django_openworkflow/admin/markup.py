"""The bits of admin HTML that several pages share: a run's link, a workflow's link, a subject's, a status badge."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib.admin.utils import quote
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from ..formatting import status_label
from ..store.queries import display_status


def run_url(run_id: Any) -> str:
    """The admin page of a run."""
    return reverse("admin:django_openworkflow_workflowrun_change", args=[run_id])


def workflow_url(name: str) -> str:
    """The admin page of the workflow ``name`` (its versions, schedule, runs, durations and failures)."""
    return reverse("admin:django_openworkflow_workflowrun_workflow", args=[name])


def workflow_link(name: str) -> str:
    """The workflow's name as a link to its page."""
    return format_html('<a class="owf-workflow-link" href="{}">{}</a>', workflow_url(name), name)


def badge(shown: str) -> str:
    """A coloured badge of a display status (``retrying``, ``waiting`` ... or a stored status)."""
    return format_html('<span class="owf-badge owf-status-{}">{}</span>', shown, status_label(shown))


def status_badge(status: str, worker_id: str | None = None) -> str:
    """A coloured badge; ``parked`` for a running run that no worker holds (:func:`badge` tells more)."""
    return badge(display_status(status, worker_id))


def subject_runs_url(subject_type: str, subject_id: str) -> str:
    """The run list filtered to one subject's runs."""
    base = reverse("admin:django_openworkflow_workflowrun_changelist")
    return f"{base}?{urlencode({'subject': f'{subject_type}:{subject_id}'})}"


def attribute_runs_url(name: str, value: Any) -> str:
    """The run list filtered to the runs whose attribute ``name`` equals ``value`` (``?attribute=name=value``)."""
    base = reverse("admin:django_openworkflow_workflowrun_changelist")
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return f"{base}?{urlencode({'attribute': f'{name}={text}'})}"


def subject_link(subject_type: str, subject_id: str) -> str:
    """``app_label.model:pk``, a link to the object's own admin page where the admin has one.

    The object is not read: it may be gone (its runs stay), and its page says so.
    """
    app_label, _, model_name = subject_type.partition(".")
    text = f"{subject_type}:{subject_id}"
    try:
        url = reverse(f"admin:{app_label}_{model_name}_change", args=[quote(subject_id)])
    except NoReverseMatch:
        return format_html('<code class="owf-subject">{}</code>', text)
    return format_html('<a class="owf-subject" href="{}"><code>{}</code></a>', url, text)
