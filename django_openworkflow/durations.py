"""Durations as people write them: ``"250ms"``, ``"1h30m"``, ``"2 hours"``, ``timedelta``.

Accepted units (case-insensitive, optional space before the unit, several
parts may follow each other): ms, s, m, h, d, w, mo (1/12 year), y (365.25
days), and their long forms (``msec``, ``sec``, ``second(s)``, ``min``,
``minute(s)``, ``hr``, ``hour(s)``, ``day(s)``, ``week(s)``, ``month(s)``,
``yr``, ``year(s)``). A bare number, or a string of one, is milliseconds, as
in the original system.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

Duration = str | int | float | timedelta

_MS_PER = {
    "ms": 1.0,
    "s": 1000.0,
    "m": 60_000.0,
    "h": 3_600_000.0,
    "d": 86_400_000.0,
    "w": 7 * 86_400_000.0,
    "y": 365.25 * 86_400_000.0,
}
_MS_PER["mo"] = _MS_PER["y"] / 12

_UNIT_ALIASES = {
    "ms": "ms", "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
    "w": "w", "week": "w", "weeks": "w",
    "mo": "mo", "month": "mo", "months": "mo",
    "y": "y", "yr": "y", "yrs": "y", "year": "y", "years": "y",
}  # fmt: skip

MAX_DURATION = timedelta(days=1000 * 365.25)
"""The longest duration accepted: a point that far ahead is still a date every database stores."""

_PART = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]+)\s*")
_BARE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*")


def parse_duration(value: Duration) -> timedelta:
    """Return ``value`` as a non-negative ``timedelta`` of at most 1,000 years; ``ValueError`` names a bad value."""
    duration = _parse(value)
    if duration > MAX_DURATION:
        raise ValueError(f"duration {value!r:.60} is longer than 1000 years, the limit")
    return duration


def _parse(value: Duration) -> timedelta:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ValueError(f"duration {value!r} is negative")
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"duration {value!r} is not a string, a number of ms, or a timedelta")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"duration {value!r} must be a finite, non-negative number of ms")
        return _milliseconds(value, value)
    bare = _BARE.fullmatch(value)
    if bare:
        return _milliseconds(float(bare.group(1)), value)
    total_ms = 0.0
    pos = 0
    for match in _PART.finditer(value):
        unit = _UNIT_ALIASES.get(match.group(2).lower())
        if match.start() != pos or unit is None:
            break
        total_ms += float(match.group(1)) * _MS_PER[unit]
        pos = match.end()
    if pos == 0 or pos != len(value):
        raise ValueError(
            f"invalid duration {value!r}: expected e.g. '250ms', '5s', '1h30m', '2 days', "
            "a number of milliseconds, or a timedelta"
        )
    return _milliseconds(total_ms, value)


def _milliseconds(ms: float, value: Duration) -> timedelta:
    if ms > MAX_DURATION / timedelta(milliseconds=1):
        raise ValueError(f"duration {value!r:.60} is longer than 1000 years, the limit")
    return timedelta(milliseconds=ms)
