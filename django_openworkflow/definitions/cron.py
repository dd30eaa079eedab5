"""Cron expressions and time zones: checking a schedule's fields, and its ticks.

Pure arithmetic on croniter, which is imported only when a schedule is
declared or computed (the optional extra ``[cron]``). What fires the ticks,
against the database, is ``worker/schedules.py``; this module imports nothing that
touches the database, and knows nothing of ``flow.py``'s ``Schedule``:
it checks the strings a schedule is made of, so ``Schedule()`` can check
itself with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from ..errors import PayloadError, WorkflowRegistrationError

POLICIES = ("latest", "skip")
OVERLAPS = ("allow_all", "skip", "buffer_one", "cancel_previous")
"""What a tick does while a run of its schedule is unfinished; the first, today's behaviour, is the default."""
KEY_PREFIX = "schedule:"
TRIGGER_PREFIX = "schedule:now:"
INSTALL_HINT = "pip install 'django-openworkflow[cron]'"
CRON_FORMAT = "five fields (minute hour day month weekday) or six (seconds last), or a nickname such as '@daily'"


def _croniter() -> Any:
    try:
        from croniter import croniter  # type: ignore[import-untyped]
    except ImportError:
        raise WorkflowRegistrationError(f"cron schedules need the croniter package: {INSTALL_HINT}") from None
    return croniter


def _zone(name: Any, what: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise WorkflowRegistrationError(f"{what}: timezone must be an IANA time zone name, got {name!r:.80}")
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        raise WorkflowRegistrationError(
            f"{what}: unknown time zone {name!r:.80} (an IANA name such as 'Europe/Paris' or 'UTC')"
        ) from None


def check_schedule(cron: Any, timezone: Any, missed: Any, input: Any, overlap: Any = "allow_all") -> None:
    """Raise :class:`WorkflowRegistrationError` unless a schedule of these fields can run.

    Called by ``Schedule()`` itself, with its own fields.
    """
    if not isinstance(cron, str):
        raise WorkflowRegistrationError(f"a schedule's cron must be a string, got {cron!r:.80}")
    what = f"schedule {cron!r:.80}"
    croniter = _croniter()
    fields = cron.split()
    shape = len(fields) in (5, 6) or (len(fields) == 1 and cron.strip().startswith("@"))
    if not shape or not croniter.is_valid(cron):
        raise WorkflowRegistrationError(f"invalid cron expression {cron!r:.80}: expected {CRON_FORMAT}")
    try:
        croniter(cron, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except ValueError:  # CroniterBadDateError: "0 0 31 2 *"
        raise WorkflowRegistrationError(f"cron expression {cron!r:.80} never fires") from None
    if timezone is not None:
        _zone(timezone, what)
    if missed not in POLICIES:
        raise WorkflowRegistrationError(f"{what}: missed must be 'latest' or 'skip', got {missed!r:.80}")
    if overlap not in OVERLAPS:
        choices = ", ".join(repr(choice) for choice in OVERLAPS)
        raise WorkflowRegistrationError(f"{what}: overlap must be one of {choices}, got {overlap!r:.80}")
    from .payload import to_json_value

    try:
        to_json_value(input, f"input of {what}", "input")
    except PayloadError as exc:
        raise WorkflowRegistrationError(str(exc)) from None


# -- the runs' idempotency keys ---------------------------------------------------


def tick_key(tick: datetime) -> str:
    """The idempotency key of a tick's run (live or backfilled): the same in every process."""
    return f"{KEY_PREFIX}{tick.astimezone(UTC).isoformat()}"


def trigger_key(now: datetime, nonce: str) -> str:
    """The key of a run started by "trigger now": never a tick's (``now:`` is no date), unique by ``nonce``."""
    return f"{TRIGGER_PREFIX}{now.astimezone(UTC).isoformat()}/{nonce}"


def scheduled_time(key: str | None) -> datetime | None:
    """The tick (or trigger) time a schedule's run was started for, read from its key; None for other runs."""
    if key is None or not key.startswith(KEY_PREFIX):
        return None
    text = (
        key.removeprefix(TRIGGER_PREFIX).split("/", 1)[0] if key.startswith(TRIGGER_PREFIX) else key[len(KEY_PREFIX) :]
    )
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


# -- tick arithmetic ------------------------------------------------------------


def zone_name(timezone: str | None) -> str:
    """A schedule's time zone, ``settings.TIME_ZONE`` when it names none (read now, not at declaration)."""
    from django.conf import settings

    return timezone or settings.TIME_ZONE or "UTC"


def _second_pass(tick: datetime, fixed_hour: bool) -> bool:
    """A tick in the hour a DST change repeats, on its second pass, of an expression with a fixed hour.

    croniter marks some unambiguous times ``fold=1`` too, so the offsets decide.
    """
    return fixed_hour and tick.fold == 1 and tick.replace(fold=0).utcoffset() != tick.utcoffset()


def ticks_after(cron: str, zone: str, after: datetime) -> Iterator[datetime]:
    """The ticks strictly after ``after``, in UTC, for ever."""
    it = _croniter()(cron, after.astimezone(ZoneInfo(zone)))
    fixed_hour = it.expanded[1] != ["*"]
    while True:
        tick = it.get_next(datetime)
        if not _second_pass(tick, fixed_hour):
            yield tick.astimezone(UTC)


def latest_tick(cron: str, zone: str, now: datetime) -> datetime:
    """The latest tick at or before ``now``, in UTC."""
    # croniter counts whole seconds and get_prev excludes its start: start just past now.
    it = _croniter()(cron, (now + timedelta(seconds=1)).astimezone(ZoneInfo(zone)))
    fixed_hour = it.expanded[1] != ["*"]
    while True:
        tick = it.get_prev(datetime)
        if tick.astimezone(UTC) <= now and not _second_pass(tick, fixed_hour):
            return tick.astimezone(UTC)
