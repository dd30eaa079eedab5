"""A run's journal as its page shows it: every step attempt, numbered within its durable key.

Payloads become plain strings here (indented JSON, an error's headline and
traceback) and are escaped by the template, never marked safe.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.translation import gettext

from ..formatting import (
    elapsed,
    format_duration,
    format_time,
    json_text,
    kind_label,
    numbered,
    pretty_json,
    split_error,
    status_label,
)
from ..models import StepAttempt, StepKind, StepStatus


@dataclass
class JournalRow:
    """One step attempt as the run page's journal shows it."""

    attempt: StepAttempt
    number: int  # attempt number of this durable key, from 1
    started: str
    finished: str
    duration: str
    output: str
    error_headline: str = ""
    error_traceback: str = ""
    error_rest: str = ""
    note: str = ""  # a sleep's wake time, a child run's status
    wait: WaitInfo | None = None  # a signal or event wait: what it waits for and what arrived

    @property
    def status_badge(self) -> str:
        """The attempt's status as a badge."""
        status = self.attempt.status
        return format_html('<span class="owf-badge owf-status-{}">{}</span>', status, status_label(status))

    @property
    def kind(self) -> str:
        """The attempt's kind in the active language."""
        return kind_label(self.attempt.kind)


def journal_rows(
    attempts: Iterable[StepAttempt], now: datetime, day_of: datetime | None = None, run_end: datetime | None = None
) -> list[JournalRow]:
    """The journal in write order, each attempt numbered within its durable key.

    Times on ``day_of``'s date (the run's creation) are shown without the date.
    An attempt still open when the run ended (``run_end``: canceled during a
    sleep, failed by its deadline) is measured up to the run's end, not now.
    """
    rows = []
    for attempt, number in numbered(attempts):
        # The step's name and the engine's attempt bookkeeping are already in the row.
        headline, traceback, rest = split_error(attempt.error, hide=("step", "run_attempt"))
        output = ""
        wait = wait_info(attempt, day_of) if attempt.kind in WAIT_KINDS else None
        if wait is None and attempt.status == StepStatus.COMPLETED and attempt.kind != StepKind.SLEEP:
            output = pretty_json(attempt.output)
        rows.append(
            JournalRow(
                attempt=attempt,
                number=number,
                started=format_time(attempt.started_at, precise=True, day_of=day_of),
                finished=format_time(attempt.finished_at, precise=True, day_of=day_of),
                duration=format_duration(elapsed(attempt.started_at, attempt.finished_at, run_end or now)),
                output=output,
                error_headline=headline,
                error_traceback=traceback,
                error_rest=rest,
                wait=wait,
                note=_attempt_note(attempt, day_of)
                + (gettext(" (still open when the run ended)") if run_end and attempt.finished_at is None else ""),
            )
        )
    return rows


WAIT_KINDS = (StepKind.SIGNAL, StepKind.EVENT)


@dataclass
class WaitInfo:
    """A signal or event wait as the journal shows it: what it waits for, until when, what arrived."""

    kind: str  # "signal" or "event"
    name: str  # the signal's name or the event's type
    match: str  # an event's pattern as compact JSON; empty for signals and match-all events
    timeout: str  # when the wait gives up, formatted; empty if unknown
    state: str  # "waiting", "arrived" or "timed out" (the template words them)
    arrived: str = ""  # the signal's data or the event's payload as indented JSON
    source: str = ""  # "signal #12", "event #3"
    held_by: str = ""  # an approval's or a task's: who claimed it
    activity: list[str] = field(default_factory=list)  # an approval's or a task's: claims, reminders, decisions

    @property
    def label(self) -> str:
        """``signal "approval"``, ``event order.paid matching {"order_id":42}``."""
        text = f'{kind_label(self.kind)} "{self.name}"'
        return gettext("%(wait)s matching %(pattern)s") % {"wait": text, "pattern": self.match} if self.match else text

    @property
    def state_label(self) -> str:
        """The state in the active language (a wait that is neither waiting nor done shows its status)."""
        words = {"waiting": gettext("waiting"), "arrived": gettext("received"), "timed out": gettext("timed out")}
        return words.get(self.state) or status_label(self.state)


def wait_info(attempt: StepAttempt, day_of: datetime | None = None) -> WaitInfo:
    """What a ``signal`` or ``event`` attempt waits for and, once completed, what it received."""
    context = attempt.context or {}
    is_event = attempt.kind == StepKind.EVENT
    name = str(context.get("event" if is_event else "signal") or attempt.step_name)
    pattern = context.get("match") if is_event else None
    match = json_text(pattern) if pattern else ""
    timeout_at = parse_datetime(str(context.get("timeout_at") or ""))
    timeout = format_time(timeout_at, precise=True, day_of=day_of) if timeout_at else ""
    info = WaitInfo(str(attempt.kind), name, match, timeout, "waiting")
    if attempt.status != StepStatus.COMPLETED:
        info.state = "waiting" if attempt.status == StepStatus.RUNNING else str(attempt.status)
        return info
    output = attempt.output if isinstance(attempt.output, dict) else {}
    if output.get("timed_out"):
        info.state = "timed out"
        return info
    info.state = "arrived"
    info.arrived = pretty_json(output.get("payload" if is_event else "data"))
    source_id = output.get("event_id" if is_event else "signal_id")
    info.source = f"{kind_label(attempt.kind)} #{source_id}" if source_id is not None else ""
    return info


def add_task_activity(
    rows: list[JournalRow], activity: dict[int, tuple[str, list[dict[str, Any]]]], day_of: datetime | None
) -> None:
    """Show each approval's or task's holder and activity (claims, releases, reminders ...) under its wait."""
    words = {
        "claim": gettext("claimed by %(by)s"),
        "release": gettext("released by %(by)s"),
        "reassign": gettext("reassigned to %(to)s by %(by)s"),
        "remind": gettext("assignees reminded"),
        "escalate": gettext("escalated"),
        "sign-off": gettext("approved by %(by)s, more approvals needed"),
        "approve": gettext("approved by %(by)s"),
        "reject": gettext("rejected by %(by)s"),
        "submit": gettext("submitted by %(by)s"),
    }
    for row in rows:
        found = activity.get(row.attempt.id)
        if row.wait is None or found is None:
            continue
        row.wait.held_by, entries = found
        for entry in entries:
            said = words.get(str(entry.get("action")), str(entry.get("action")))
            at = format_time(parse_datetime(str(entry.get("at", ""))), precise=True, day_of=day_of)
            to = entry.get("to", "")
            said = said % {"by": entry.get("by", ""), "to": to if isinstance(to, str) else json_text(to)}
            if entry.get("count"):  # reminders in a row, kept as one entry (store/approvals.reminded)
                last = format_time(parse_datetime(str(entry.get("last_at", ""))), precise=True, day_of=day_of)
                said = gettext("assignees reminded %(count)d times, the last at %(last)s") % {
                    "count": entry["count"],
                    "last": last,
                }
            row.wait.activity.append(f"{at} {said}")


def _attempt_note(attempt: StepAttempt, day_of: datetime | None) -> str:
    context = attempt.context or {}
    if attempt.kind == StepKind.SLEEP and context.get("resume_at"):
        resume = parse_datetime(str(context["resume_at"]))
        text = gettext("until %(time)s") % {"time": format_time(resume, precise=True, day_of=day_of)} if resume else ""
        return text + (gettext(" (woken early)") if context.get("woken_early") else "")
    if attempt.kind == StepKind.WORKFLOW and context.get("workflow"):
        child = f"{context['workflow']}" + (f" {context['version']}" if context.get("version") else "")
        return gettext("child %(workflow)s") % {"workflow": child}
    return ""
