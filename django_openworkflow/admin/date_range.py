"""The run list's free time range filters: runs created, or finished, from one moment to another.

Beside Django's date choices (today, past 7 days, this month), the sidebar
has a small GET form with two ``datetime-local`` inputs for each: ``?created_from=2026-11-20T08:00&created_to=...``,
``?finished_from=...&finished_to=...``. Either end may be left out. A
moment is a ``datetime-local`` value, a date alone (``to`` a date means to
the end of that day) or ISO 8601 with an offset (the dashboard's links),
read in the current time zone when it has none. A bound that cannot be read
is left out, and the page says so once in a message; the list never fails.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..models import WorkflowRun
from .time_range import DAY, parse_moment


class TimeRangeFilter(admin.ListFilter):
    """Runs whose ``field`` is from ``<prefix>_from`` to ``<prefix>_to`` (both ends included)."""

    field = "created_at"
    prefix = "created"
    template = "django_openworkflow/range_filter.html"

    def __init__(self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any) -> None:
        super().__init__(request, params, model, model_admin)
        self.given: dict[str, str] = {}
        for name in (self.from_name, self.to_name):
            if name in params:
                value = params.pop(name)
                text = str(value[-1] if isinstance(value, list) else value).strip()
                if text:
                    self.given[name] = text
                    self.used_parameters[name] = text
        self.since, self.until, problems = self._bounds()
        if problems:
            self._tell(request, problems)

    @property
    def from_name(self) -> str:
        return f"{self.prefix}_from"

    @property
    def to_name(self) -> str:
        return f"{self.prefix}_to"

    def expected_parameters(self) -> list[str | None]:
        return [self.from_name, self.to_name]

    def has_output(self) -> bool:
        return True

    def _bounds(self) -> tuple[datetime | None, datetime | None, list[str]]:
        problems = []
        since = until = None
        if self.from_name in self.given:
            since = parse_moment(self.given[self.from_name])
            if since is None:
                problems.append(self._unreadable(gettext("from"), self.given[self.from_name]))
        if self.to_name in self.given:
            text = self.given[self.to_name]
            until = parse_moment(text)
            if until is None:
                problems.append(self._unreadable(gettext("to"), text))
            elif DAY.fullmatch(text):
                until += timedelta(days=1) - timedelta(microseconds=1)  # a date alone: all of that day
        if since is not None and until is not None and since > until:
            problems.append(
                gettext("%(title)s: the range ends before it starts; it is left out.") % {"title": self.title}
            )
            since = until = None
        return since, until, problems

    def _unreadable(self, which: str, text: str) -> str:
        problem = gettext("%(title)s %(which)s %(text)s is not a date and time, such as 2026-11-20T08:00: left out.")
        return problem % {
            "title": self.title,
            "which": which,
            "text": repr(text[:40]),
        }

    def _tell(self, request: HttpRequest, problems: list[str]) -> None:
        # The change list builds its filters more than once per request (the status counts rebuild them).
        told: set[str] = request.__dict__.setdefault("_owf_range_told", set())
        for problem in problems:
            if problem not in told:
                told.add(problem)
                messages.error(request, problem)

    def queryset(self, request: HttpRequest, queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
        if self.since is not None:
            queryset = queryset.filter(**{f"{self.field}__gte": self.since})
        if self.until is not None:
            queryset = queryset.filter(**{f"{self.field}__lte": self.until})
        return queryset

    def choices(self, changelist: Any) -> Any:
        mine = {self.from_name, self.to_name}
        hidden = [
            (name, value)
            for name, values in changelist.filter_params.items()
            if name not in mine and name != "p"
            for value in (values if isinstance(values, list) else [values])
        ]
        yield {
            "hidden": hidden,
            "from_name": self.from_name,
            "to_name": self.to_name,
            "from_value": _input_value(self.since),
            "to_value": _input_value(self.until),
            "active": bool(self.given),
            "clear_url": changelist.get_query_string(remove=[*mine, "p"]),
        }


def _input_value(moment: datetime | None) -> str:
    """What the ``datetime-local`` input shows: the bound read, in local time, to the second."""
    return "" if moment is None else timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M:%S")


class CreatedRangeFilter(TimeRangeFilter):
    """Runs created from one moment to another."""

    title = _("created between")
    field = "created_at"
    prefix = "created"


class FinishedRangeFilter(TimeRangeFilter):
    """Runs finished from one moment to another (the dashboard's and the workflow page's figures link here)."""

    title = _("finished between")
    field = "finished_at"
    prefix = "finished"
