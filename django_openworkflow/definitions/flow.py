"""Flow control declarations: queues, priorities, limits, debounce, cron schedules and event starts.

Declared on ``@workflow(...)`` and checked there, so a bad value fails at
import time with the workflow's name in the message. The objects
(``Concurrency(0)``) are made before ``@workflow`` is called, so they do not
raise when they are made: each keeps what is wrong with it, and ``@workflow``
raises it, naming the workflow (see :class:`Declaration`). What they mean at run
time is enforced by the database in the claim (``store/queue.py``); a run
keeps the limits it was started with, so changing a declaration affects
runs started afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ..conf import PRIORITY_RANGE as PRIORITY_RANGE  # re-exported: the API checks priorities against it
from ..durations import Duration, parse_duration
from ..errors import InvalidArgument, PayloadError, WorkflowRegistrationError
from .payload import check_text, to_json_value

DEFAULT_QUEUE = "default"
"""The queue of a workflow that names none, and the one ``runworkflows`` claims without ``--queue``."""

BLOCKED_UNTIL = datetime(9999, 1, 1, tzinfo=UTC)
"""``available_at`` of a run waiting for a place under its concurrency limit: after every due run in claim order."""

PROBE_INTERVAL = timedelta(seconds=1)
"""How often one waiting run per key asks again for a place (a run that lets go of one also wakes it at once)."""

FLOW_COLUMNS = (
    "queue", "priority", "concurrency_key", "concurrency_limit", "concurrency_counts_parked",
    "rate_key", "rate_limit", "rate_period", "retention", "fairness_key",
)  # fmt: skip
"""The run's columns a start fills from the declarations (``WorkflowSpec.flow_fields``); a re-run copies them."""

QUEUE_CHARACTERS = "[A-Za-z0-9_.:-]{1,64}"
"""A queue name, as a regular expression both Python and JSON Schema (the API's document) read alike."""
# \Z, not $: "$" also matches before a final newline, and "emails\n" is no queue name.
QUEUE_NAME = re.compile(rf"\A{QUEUE_CHARACTERS}\Z")

KeyFunction = Callable[[Any], Any]
"""Computes a key from the run's input (the value given to ``run()``)."""


def check_queue(queue: Any, where: str) -> str:
    """A queue name: 1 to 64 letters, digits, ``_ . : -`` (it is also a Celery queue name and a CLI argument)."""
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidArgument(
            f"{where}: queue must be 1 to 64 characters of letters, digits, '_', '.', ':' or '-', got {queue!r:.80}",
            "queue",
        )
    return queue


def check_priority(priority: Any, where: str) -> int:
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise InvalidArgument(
            f"{where}: priority must be a whole number from {low} to {high}, got {priority!r:.80}", "priority"
        )
    return priority


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkflowRegistrationError(f"{what} must be a whole number of at least 1, got {value!r:.80}")
    return value


def _period(value: Duration, what: str) -> timedelta:
    try:
        period = parse_duration(value)
    except (TypeError, ValueError) as exc:
        raise WorkflowRegistrationError(f"{what}: {exc}") from None
    if period <= timedelta(0):
        raise WorkflowRegistrationError(f"{what} must be longer than zero, got {value!r:.80}")
    return period


def check_key(key: Any, what: str) -> KeyFunction | str | None:
    if key is None or callable(key):
        return key
    if isinstance(key, str) and 0 < len(key) <= 200:
        return key
    raise WorkflowRegistrationError(
        f"{what} must be None, a string of 1 to 200 characters or a function of the input, got {key!r:.80}"
    )


class Declaration:
    """What the declaration objects share: a bad field is raised by ``@workflow``, with the workflow's name.

    ``@workflow(concurrency=Concurrency(0))`` makes the object before
    ``@workflow`` runs, so an error raised by its constructor could not name
    the workflow. Each object checks its fields when it is made and keeps the
    :class:`WorkflowRegistrationError` it would raise; ``@workflow`` calls
    :meth:`check` with the workflow's name, which raises it (chained to the
    original). Code that uses an object outside ``@workflow`` calls
    ``check()`` itself.
    """

    def _keep_problem(self, checks: Callable[[], None]) -> None:
        try:
            checks()
        except WorkflowRegistrationError as exc:
            object.__setattr__(self, "_problem", exc)

    def check(self, where: str | None = None) -> None:
        """Raise what is wrong with this declaration, if anything; ``where`` (``"workflow 'x'"``) leads the message."""
        problem: WorkflowRegistrationError | None = getattr(self, "_problem", None)
        if problem is None:
            return
        if where is None:
            raise problem
        raise WorkflowRegistrationError(f"{where}: {problem}") from problem


@dataclass(frozen=True)
class Concurrency(Declaration):
    """At most ``limit`` runs of the workflow (per ``key``) hold a worker at once, across every process.

    ``key`` is a function of the input (``lambda input: input["customer"]``)
    or a fixed string; without one the limit is for the whole workflow.
    ``count_parked``: with False (the default) a run that sleeps, waits for
    a signal, event or child, or backs off before a retry gives its place
    up and queues for it again when it wakes; with True it keeps its place
    from its first claim to its end ("at most N in progress").
    """

    limit: int
    key: KeyFunction | str | None = None
    count_parked: bool = False

    def __post_init__(self) -> None:
        self._keep_problem(self._check_fields)

    def _check_fields(self) -> None:
        _positive(self.limit, "Concurrency limit")
        check_key(self.key, "Concurrency key")
        if not isinstance(self.count_parked, bool):
            raise WorkflowRegistrationError(
                f"Concurrency count_parked must be True or False, got {self.count_parked!r:.80}"
            )


@dataclass(frozen=True)
class RateLimit(Declaration):
    """At most ``limit`` runs of the workflow (per ``key``) start in any window of ``per``.

    A start is a run's first claim, counted from the runs' ``started_at``
    (the database clock); a run over the limit waits until the window has room.
    """

    limit: int
    per: Duration = "1s"
    key: KeyFunction | str | None = None

    def __post_init__(self) -> None:
        self._keep_problem(self._check_fields)

    def _check_fields(self) -> None:
        _positive(self.limit, "RateLimit limit")
        _period(self.per, "RateLimit per")
        check_key(self.key, "RateLimit key")

    @property
    def period(self) -> timedelta:
        return parse_duration(self.per)


@dataclass(frozen=True)
class Debounce(Declaration):
    """Starts with one key within ``period`` of each other become one run, with the last input.

    Each start of a run not yet claimed moves its start to ``period`` after
    this start and replaces its input (trailing edge, as Inngest and DBOS
    debounce). ``max_wait`` caps how long continual starts can put it off.
    """

    period: Duration
    key: KeyFunction | str | None = None
    max_wait: Duration | None = None

    def __post_init__(self) -> None:
        self._keep_problem(self._check_fields)

    def _check_fields(self) -> None:
        _period(self.period, "Debounce period")
        check_key(self.key, "Debounce key")
        if self.max_wait is not None:
            _period(self.max_wait, "Debounce max_wait")

    @property
    def delay(self) -> timedelta:
        return parse_duration(self.period)

    @property
    def max_delay(self) -> timedelta | None:
        return None if self.max_wait is None else parse_duration(self.max_wait)


@dataclass(frozen=True)
class Schedule(Declaration):
    """Start a run at each tick of a cron expression, in a time zone.

    ``cron`` has five fields (minute hour day month weekday) or six (with
    seconds last), as croniter reads them. ``timezone`` is an IANA name
    (default: ``settings.TIME_ZONE``). ``input`` is the input of every run.
    ``missed``: what to do when a tick is more than a minute late (every
    worker was down): ``"latest"`` (the default) starts one run, for the
    most recent tick; ``"skip"`` starts none and waits for the next tick.
    ``overlap``: what a tick does while a run of the schedule is unfinished:
    ``"allow_all"`` (the default) starts its run anyway; ``"skip"`` starts
    none; ``"buffer_one"`` starts it once the unfinished run ends (one tick
    waits at most, later ones are dropped); ``"cancel_previous"`` cancels
    the unfinished runs and starts its own.
    """

    cron: str
    timezone: str | None = None
    input: Any = None
    missed: str = "latest"
    overlap: str = "allow_all"

    def __post_init__(self) -> None:
        from .cron import check_schedule  # croniter is imported only when schedules are used

        self._keep_problem(lambda: check_schedule(self.cron, self.timezone, self.missed, self.input, self.overlap))


@dataclass(frozen=True)
class OnEvent(Declaration):
    """Start a run for each event of type ``event`` whose payload contains ``match``.

    ``match`` is a JSON object matched as in ``ctx.step.wait_for_event``
    (JSON containment, PostgreSQL's ``@>``); without one every event of the
    type starts a run. The run's input is the event's payload.
    ``send_event`` starts the run in the sender's transaction, once per
    event: a repeated idempotency key starts nothing.
    """

    event: str
    match: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._keep_problem(self._check_fields)

    def _check_fields(self) -> None:
        if not isinstance(self.event, str) or not 0 < len(self.event) <= 255:
            raise WorkflowRegistrationError(
                f"OnEvent event type must be a non-empty string of at most 255 characters, got {self.event!r:.80}"
            )
        try:
            check_text(self.event, "OnEvent event type")
            pattern = to_json_value(
                {} if self.match is None else self.match, f"match of OnEvent({self.event!r})", "match"
            )
        except PayloadError as exc:
            raise WorkflowRegistrationError(str(exc)) from None
        if not isinstance(pattern, dict):
            raise WorkflowRegistrationError(
                f"match of OnEvent({self.event!r}) must be a dict (a JSON object), got {self.match!r:.80}"
            )
        object.__setattr__(self, "match", pattern)  # as it reads back from JSON: what containment compares

    @property
    def pattern(self) -> dict[str, Any]:
        """The match pattern, ``{}`` when none was given (every payload contains it)."""
        return self.match or {}


def resolve_key(key: KeyFunction | str | None, input: Any, workflow_name: str, what: str) -> str:
    """The stored key: the workflow's name, then the fixed or computed part (``"charge/42"``).

    Raises :class:`InvalidArgument` (naming ``what``) when the key function
    fails or gives something that is not a string or a number.
    """
    if key is None:
        return workflow_name
    try:
        value = key(input) if callable(key) else key
    except Exception as exc:
        raise InvalidArgument(f"the {what} function of workflow {workflow_name!r} raised {exc!r:.200}", what) from exc
    if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument(
            f"the {what} of workflow {workflow_name!r} must be a string or a number, got {value!r:.80}", what
        )
    stored = f"{workflow_name}/{value}"
    if len(stored) > 255:
        raise InvalidArgument(f"the {what} {stored!r:.80}... is longer than 255 characters", what)
    check_text(stored, what)
    return stored
