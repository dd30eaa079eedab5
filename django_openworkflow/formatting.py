"""How durations, times, ids, payloads and errors read to people: one wording for the admin, the CLI and the demo."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from .models import WorkflowRun
from .states import CLAIMABLE_STATUSES, RunStatus


def format_duration(value: timedelta | None) -> str:
    """A short human duration: ``350 ms``, ``4.2 s``, ``4 m 12 s``, ``2 h 5 m``, ``3 d 4 h``."""
    if value is None:
        return ""
    seconds = value.total_seconds()
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 0.001:
        return f"{sign}<1 ms" if seconds else "0 ms"
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{sign}{seconds:.1f} s"
    if seconds < 60:
        return f"{sign}{seconds:.0f} s"
    whole = int(seconds)
    for unit, size, sub_unit, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if whole >= size:
            major, rest = divmod(whole, size)
            minor = rest // sub_size
            return f"{sign}{major} {unit}" + (f" {minor} {sub_unit}" if minor else "")
    return f"{sign}{whole} s"  # pragma: no cover - the loop always returns


def format_time(value: datetime | None, *, precise: bool = False, day_of: datetime | None = None) -> str:
    """A timestamp in the current time zone.

    ``precise`` adds milliseconds (step attempts take a few). With ``day_of``
    the date is left out when it is that moment's date: a journal's times
    are read against the run's start, and repeating the date only crowds them.
    """
    if value is None:
        return ""
    local = timezone.localtime(value)
    clock = local.strftime("%H:%M:%S.%f")[:-3] if precise else local.strftime("%H:%M:%S")
    if day_of is not None and timezone.localtime(day_of).date() == local.date():
        return clock
    return f"{local:%Y-%m-%d} {clock}"


def compact_time(value: datetime, now: datetime) -> str:
    """For the run list: ``14:03:12`` today, ``Nov 21 14:03`` this year, else ``2024-11-21``."""
    local, today = timezone.localtime(value), timezone.localtime(now)
    if local.date() == today.date():
        return f"{local:%H:%M:%S}"
    if local.year == today.year:
        return f"{local:%b} {local.day} {local:%H:%M}"
    return f"{local:%Y-%m-%d}"


def elapsed(start: datetime | None, end: datetime | None, now: datetime) -> timedelta | None:
    """From ``start`` to ``end``, or to ``now`` while it is still going."""
    if start is None:
        return None
    return (end or now) - start


def pretty_json(value: Any) -> str:
    """Indented JSON text, for a ``<pre>`` (the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder)


def short_id(run_id: Any) -> str:
    """The first 8 hex digits of a run id: what the list shows and the search accepts."""
    return str(run_id)[:8]


def wake_hint(run: WorkflowRun, now: datetime) -> str:
    """``wakes in 4 m`` for a parked run, ``starts in …`` for a scheduled one, else empty."""
    if run.status not in CLAIMABLE_STATUSES or run.worker_id is not None:
        return ""
    wait = run.available_at - now
    if wait <= timedelta(0):
        return "due now"
    return ("starts in " if run.status == RunStatus.PENDING else "wakes in ") + format_duration(wait)


def split_error(error: Any, hide: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """An error dict as (``Type: message`` headline, traceback, the other keys as JSON but ``hide``)."""
    if not isinstance(error, dict):
        return "", "", pretty_json(error) if error is not None else ""
    rest = {k: v for k, v in error.items() if k not in ("type", "message", "traceback", *hide)}
    headline = ": ".join(str(part) for part in (error.get("type"), error.get("message")) if part)
    return headline, str(error.get("traceback") or ""), pretty_json(rest) if rest else ""
