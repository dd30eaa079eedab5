"""The dashboard page: what finished over a time range, how long runs took, what waits now.

The range is a preset, any number of hours or a from/to span
(:mod:`.time_range`). Every figure is a link to the runs it counts in the
run list, filtered the same way. The charts are drawn in :mod:`.charts`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse

from .. import formatting as fmt
from ..states import DisplayStatus, RunStatus
from ..store import dashboard, get_backend
from ..store.dashboard import OUTCOMES, Bucket
from .charts import duration_chart, finished_chart, outcome_label
from .markup import workflow_url
from .time_range import (
    MAX_HOURS,
    PRESET_HOURS,
    TimeRange,
    bar_minutes,
    hours_label,
    time_range,
    up_to_the_second,
)

RANGES = {hours: bar_minutes(timedelta(hours=hours)) for hours in PRESET_HOURS}
"""Hours offered as links -> minutes per bar (any other number of hours, or a from/to span, may be asked for)."""


def list_url(query: str = "") -> str:
    """The run list, filtered by ``query`` (a query string without ``?``)."""
    url = reverse("admin:django_openworkflow_workflowrun_changelist")
    return f"{url}?{query}" if query else url


def finished_list_url(window: TimeRange, **filters: str) -> str:
    """The runs that finished in ``window`` (and match ``filters``) in the run list."""
    extra = urlencode(filters)
    return list_url(window.list_query("finished") + (f"&{extra}" if extra else ""))


def range_choices(window: TimeRange) -> dict[str, Any]:
    """The preset links and the free range form's values, for ``django_openworkflow/time_range.html``."""
    return {
        "range": window,
        "ranges": [(hours, hours_label(hours), hours == window.hours) for hours in PRESET_HOURS],
        "range_values": window.form_values(),
        "range_error": window.error,
        "range_max_hours": MAX_HOURS,
    }


def dashboard_context(params: Any) -> dict[str, Any]:
    """What the template shows for the request's GET ``params`` (``hours``, or ``from`` and ``to``).

    A string is read as ``?hours=`` alone (the former signature).
    """
    if params is None or isinstance(params, str):
        params = {"hours": params or ""}
    # Whole seconds, rounded up: the links to the run list give the range to the second, and must count
    # the same runs, those finished earlier in this second included.
    now = up_to_the_second(get_backend().now())
    window = time_range(params, now)
    data = dashboard.read_between(window.since, window.until, window.bar_minutes, now)
    rate = data.failure_rate
    finished_all = finished_list_url(window, status__in=",".join(OUTCOMES))
    due = urlencode({"status__in": "pending,running", "available_at__lte": now.isoformat()})
    return {
        **range_choices(window),
        "hours": window.hours,
        "data": data,
        "total_finished": sum(data.finished.values()),
        "finished_url": finished_all,
        "finished": [
            (outcome, outcome_label(outcome), data.finished[outcome], finished_list_url(window, status=outcome))
            for outcome in OUTCOMES
        ],
        "failure_rate": "-" if rate is None else f"{rate * 100:.1f} %",
        "failed_url": finished_list_url(window, status=RunStatus.FAILED),
        "per_minute_chart": finished_chart(data.buckets, window.until, link=_bucket_url),
        "duration_chart": duration_chart(data.durations, link=workflow_url),
        "queues": [
            (
                queue.queue,
                queue.due,
                fmt.format_duration(data.now - queue.oldest_due_at) if queue.oldest_due_at else "",
                list_url(f"{due}&{urlencode({'queue': queue.queue})}"),
            )
            for queue in data.queues
        ],
        "due_total": sum(queue.due for queue in data.queues),
        "due_url": list_url(due),
        "in_flight_url": list_url(urlencode({"status": DisplayStatus.RUNNING})),
        "retrying_now": data.parked.get(DisplayStatus.RETRYING, 0),
        "retrying_url": list_url(urlencode({"status": DisplayStatus.RETRYING})),
        "waiting_now": data.parked.get(DisplayStatus.WAITING, 0),
        "waiting_url": list_url(urlencode({"status": DisplayStatus.WAITING})),
    }


def bucket_range(bucket: Bucket) -> TimeRange:
    """The span of one bar: to a microsecond before the next (the run list's filter includes both ends)."""
    end = bucket.start + timedelta(minutes=bucket.minutes) - timedelta(microseconds=1)
    return TimeRange(bucket.start, end, bucket.minutes, None)


def _bucket_url(bucket: Bucket) -> str:
    """The runs that finished in one bar."""
    return finished_list_url(bucket_range(bucket), status__in=",".join(OUTCOMES))
