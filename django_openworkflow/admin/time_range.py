"""The time range a dashboard or a workflow page shows: a preset, any number of hours, or from and to.

``?hours=36`` shows the 36 hours before now; ``?from=2026-11-20T08:00&to=2026-11-20T18:00``
(the ``datetime-local`` inputs' format, a date alone, or ISO 8601 with an
offset) shows that span, read in the current time zone when no offset is
given. Bad input never fails the page: :func:`time_range` says what is
wrong in :attr:`TimeRange.error` and shows the default range instead.

Bars are as wide as needed to draw at most :data:`MAX_BARS` of them, in
round minutes (1, 2, 5, 10, 15, 30 ... a day).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime
from django.utils.translation import gettext, npgettext

PRESET_HOURS = (1, 3, 6, 24, 168)
"""The ranges offered as links, in hours (168: a week)."""
DEFAULT_HOURS = 3
MAX_HOURS = 24 * 93
"""The longest range a page shows (about three months)."""
MAX_BARS = 180
BAR_MINUTES = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class TimeRange:
    """From ``since`` to ``until`` in bars of ``bar_minutes``; ``hours`` when it ends now; ``error``: what was bad."""

    since: datetime
    until: datetime
    bar_minutes: int
    hours: int | None  # a range that ends now, in whole hours; None for a from/to range
    error: str = ""

    @property
    def label(self) -> str:
        """``last 3 hours``, or ``2026-11-20 08:00 to 2026-11-20 18:00`` (local time)."""
        if self.hours is not None:
            return hours_label(self.hours)
        return gettext("%(since)s to %(until)s") % {"since": _local(self.since), "until": _local(self.until)}

    def query(self) -> str:
        """The query string that shows this range again (``hours=3`` or ``from=...&to=...``)."""
        if self.hours is not None:
            return urlencode({"hours": self.hours})
        return urlencode({"from": _iso(self.since), "to": _iso(self.until)})

    def list_query(self, field: str = "finished") -> str:
        """The run list's filter for runs whose ``field`` (created or finished) time is in this range."""
        return urlencode({f"{field}_from": _iso(self.since), f"{field}_to": _iso(self.until)})

    def form_values(self) -> dict[str, str]:
        """What the range form's inputs show: hours, or from and to as ``datetime-local`` values."""
        if self.hours is not None:
            return {"hours": str(self.hours), "from": "", "to": ""}
        return {"hours": "", "from": _input(self.since), "to": _input(self.until)}


def up_to_the_second(now: datetime) -> datetime:
    """``now`` rounded up to a whole second: a range that ends there holds every run finished so far.

    The pages' links to the run list give their range to the second. Rounded down, a run that
    finished earlier in the current second fell outside it (a page saying "failed 2" beside
    "0 runs finished"); rounded up, the page and its links count the same runs.
    """
    whole = now.replace(microsecond=0)
    return whole if whole == now else whole + timedelta(seconds=1)


def hours_label(hours: int) -> str:
    """``last hour``, ``last 6 hours``, ``last 7 days`` (whole days from 48 hours on)."""
    if hours >= 48 and hours % 24 == 0:
        return npgettext("time range", "last day", "last %(n)d days", hours // 24) % {"n": hours // 24}
    return npgettext("time range", "last hour", "last %(n)d hours", hours) % {"n": hours}


def bar_minutes(span: timedelta) -> int:
    """The narrowest round bar width that draws ``span`` in at most :data:`MAX_BARS` bars."""
    minutes = span.total_seconds() / 60
    return next((m for m in BAR_MINUTES if minutes / m <= MAX_BARS), BAR_MINUTES[-1])


def parse_moment(text: str) -> datetime | None:
    """``text`` as an aware datetime (a date alone is its midnight; no offset: the current time zone), or None."""
    text = text.strip()
    try:
        if DAY.fullmatch(text):
            day = parse_date(text)
            moment = datetime.combine(day, time()) if day is not None else None
        else:
            moment = parse_datetime(text)
    except ValueError:  # well-formed but impossible: 2026-02-30
        return None
    if moment is None:
        return None
    if timezone.is_naive(moment):
        try:
            moment = timezone.make_aware(moment)
        except (ValueError, OverflowError):  # out of range once shifted, or a zone gap
            return None
    return moment


def time_range(params: Any, now: datetime) -> TimeRange:
    """The range ``params`` (a request's GET) asks for, ending at most at ``now``; the default one if they are bad."""
    given_from, given_to = (params.get("from") or "").strip(), (params.get("to") or "").strip()
    given_hours = (params.get("hours") or "").strip()
    try:
        if given_from or given_to:
            return _between(given_from, given_to, now)
        if given_hours:
            return _last(_hours(given_hours), now)
    except ValueError as exc:
        return _last(DEFAULT_HOURS, now, error=str(exc))
    return _last(DEFAULT_HOURS, now)


def _hours(text: str) -> int:
    try:
        hours = int(text)
    except ValueError:
        raise ValueError(
            gettext("The range %(hours)s is not a whole number of hours.") % {"hours": repr(text[:40])}
        ) from None
    if not 1 <= hours <= MAX_HOURS:
        raise ValueError(
            gettext("The range must be from 1 to %(max)d hours, not %(hours)d.") % {"max": MAX_HOURS, "hours": hours}
        )
    return hours


def _last(hours: int, now: datetime, error: str = "") -> TimeRange:
    span = timedelta(hours=hours)
    return TimeRange(now - span, now, bar_minutes(span), hours, error)


def _between(given_from: str, given_to: str, now: datetime) -> TimeRange:
    since = parse_moment(given_from) if given_from else None
    if since is None:
        raise ValueError(_bad_moment(gettext("From"), given_from))
    until = parse_moment(given_to) if given_to else now
    if until is None:
        raise ValueError(_bad_moment(gettext("To"), given_to))
    if DAY.fullmatch(given_to):
        until += timedelta(days=1)  # a date alone: to the end of that day
    until = min(until, now)
    if since >= until:
        raise ValueError(gettext("The range must start before it ends, and before now."))
    if until - since > timedelta(hours=MAX_HOURS):
        raise ValueError(gettext("The range may be at most %(max)d hours long.") % {"max": MAX_HOURS})
    return TimeRange(since, until, bar_minutes(until - since), None)


def _bad_moment(which: str, text: str) -> str:
    if not text:
        return gettext("%(which)s is missing: give a date and time, such as 2026-11-20T08:00.") % {"which": which}
    return gettext("%(which)s %(text)s is not a date and time, such as 2026-11-20T08:00.") % {
        "which": which,
        "text": repr(text[:40]),
    }


def _local(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")


def _input(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%dT%H:%M")


def _iso(moment: datetime) -> str:
    """A moment for a URL, with its offset (so it means the same in any time zone); microseconds only if any."""
    return timezone.localtime(moment).isoformat()
