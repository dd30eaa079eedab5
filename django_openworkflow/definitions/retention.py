"""Retention: how long a finished run is kept, fixed on the run when it starts.

A run's retention is decided once, at start, and written on its row
(``WorkflowRun.retention``): the start's own ``retention=`` if given, else
the workflow's ``@workflow(retention=...)``, else ``OPENWORKFLOW["RETENTION"]``
(default None: kept until deleted by hand). ``OPENWORKFLOW["MAX_RETENTION"]``,
if set, caps it (a run that would be kept forever gets the ceiling). A run
expires ``retention`` after it finished; ``manage.py workflows prune`` and the
workers' sweep (``worker/prune.py``) delete expired runs.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..conf import owf_settings
from ..durations import Duration, parse_duration

__all__ = ["expires_at", "global_retention", "parse_retention", "resolve_retention"]


def parse_retention(value: Duration | None, what: str) -> timedelta | None:
    """``value`` as a positive ``timedelta`` (None stays None); ``ValueError`` names ``what`` and the value."""
    if value is None:
        return None
    try:
        duration = parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{what} {value!r:.60} is not a valid retention: {exc}") from None
    if duration <= timedelta(0):
        raise ValueError(f"{what} {value!r:.60} is not a valid retention: it must be longer than zero")
    return duration


def _setting(key: str) -> timedelta | None:
    return parse_retention(owf_settings.raw(key), f"OPENWORKFLOW[{key!r}]")


def resolve_retention(override: timedelta | None, declared: timedelta | None) -> timedelta | None:
    """The retention a run gets: the start's, else the workflow's, else the global default; capped by the ceiling.

    Both arguments are already parsed (:func:`parse_retention`).
    """
    retention = override if override is not None else declared if declared is not None else _setting("RETENTION")
    ceiling = _setting("MAX_RETENTION")
    if ceiling is not None and (retention is None or retention > ceiling):
        return ceiling
    return retention


def global_retention() -> timedelta | None:
    """``OPENWORKFLOW["RETENTION"]``, parsed (also how long events are kept)."""
    return _setting("RETENTION")


def expires_at(finished_at: datetime | None, retention: timedelta | None) -> datetime | None:
    """When a finished run becomes prunable; None if it is kept until deleted by hand or not finished yet."""
    if finished_at is None or retention is None:
        return None
    return finished_at + retention


def prune_interval() -> timedelta | None:
    """``OPENWORKFLOW["PRUNE_INTERVAL"]``; None when the workers' sweep is off (None or 0)."""
    value = owf_settings.raw("PRUNE_INTERVAL")
    if value is None or value == 0:
        return None
    try:
        interval = parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"OPENWORKFLOW['PRUNE_INTERVAL'] {value!r:.60} is not a valid interval: {exc}") from None
    return interval if interval > timedelta(0) else None


# -- pruning ------------------------------------------------------------------
