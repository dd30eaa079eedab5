"""What the admin shows and does, apart from its registration: a run's page and the actions.

``admin.py`` wires these into Django's admin; this module holds the parts
that can be read and tested on their own: formatting, the journal rows, the
timeline picture and the run actions. Payloads are
turned into plain strings here and escaped by the templates, never marked safe;
the pages' control characters and lone surrogates are written as escapes
(:class:`PrintableTemplateResponse`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html, format_html_join

from . import operations
from .formatting import (
    PAGE_TEXT,
    elapsed,
    format_duration,
    format_time,
    json_text,
    pretty_json,
    printable,
    short_id,
    split_error,
)
from .models import (
    CLAIMABLE_STATUSES,
    Signal,
    StepAttempt,
    StepKind,
    StepStatus,
    WorkflowRun,
)
from .store.queries import PAYLOAD_FIELDS, display_status

# -- formatting ---------------------------------------------------------------


def run_url(run_id: Any) -> str:
    """The admin page of a run."""
    return reverse("admin:django_openworkflow_workflowrun_change", args=[run_id])


def status_badge(status: str, worker_id: str | None = None) -> str:
    """A coloured badge; ``parked`` for a running run that no worker holds."""
    shown = display_status(status, worker_id)
    return format_html('<span class="owf-badge owf-status-{}">{}</span>', shown, shown)


class PrintableTemplateResponse(TemplateResponse):
    """A page whose control characters and lone surrogates are written as escapes (``\\x1b``, ``\\ud800``).

    Rows written before payloads were checked, or by other code, may hold a
    lone surrogate in their JSON (SQLite keeps it), which no UTF-8 response
    can carry, or control characters in names and keys. The templates leave
    none of their own, so escaping the rendered page catches every such
    character wherever a page shows it.
    """

    @property
    def rendered_content(self) -> str:
        return printable(super().rendered_content, PAGE_TEXT)


def printable_page(response: Any) -> Any:
    """Django's own page (the change list, a run's history) served as a :class:`PrintableTemplateResponse`.

    The run's ``str()`` and names appear in markup Django writes (a checkbox's
    label, the filters), so the page is escaped as a whole, like ours. A
    redirect or an already rendered response is returned as it is.
    """
    if type(response) is TemplateResponse and not response.is_rendered:
        response.__class__ = PrintableTemplateResponse  # it adds no state: only how the content renders
    return response


# -- the journal and the timeline ---------------------------------------------


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
        return format_html('<span class="owf-badge owf-status-{}">{}</span>', self.attempt.status, self.attempt.status)


def journal_rows(
    attempts: Iterable[StepAttempt], now: datetime, day_of: datetime | None = None, run_end: datetime | None = None
) -> list[JournalRow]:
    """The journal in write order, each attempt numbered within its durable key.

    Times on ``day_of``'s date (the run's creation) are shown without the date.
    An attempt still open when the run ended (``run_end``: canceled during a
    sleep, failed by its deadline) is measured up to the run's end, not now.
    """
    seen: dict[str, int] = {}
    rows = []
    for attempt in attempts:
        seen[attempt.step_name] = number = seen.get(attempt.step_name, 0) + 1
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
                + (" (still open when the run ended)" if run_end and attempt.finished_at is None else ""),
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
    state: str  # "waiting", "arrived" or "timed out"
    arrived: str = ""  # the signal's data or the event's payload as indented JSON
    source: str = ""  # "signal #12", "event #3"

    @property
    def label(self) -> str:
        """``signal "approval"``, ``event order.paid matching {"order_id":42}``."""
        text = f'{self.kind} "{self.name}"'
        return f"{text} matching {self.match}" if self.match else text


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
    info.source = f"{attempt.kind} #{source_id}" if source_id is not None else ""
    return info


@dataclass
class SignalRow:
    """One of a run's signals, for the run page's signal block."""

    id: int
    name: str
    data: str  # indented JSON, escaped by the template
    sent: str
    consumed: str  # when a wait took it; empty while it is buffered
    idempotency_key: str | None


def signal_rows(signals: Iterable[Signal], day_of: datetime | None = None) -> tuple[list[SignalRow], list[SignalRow]]:
    """A run's signals split into (buffered, consumed), each oldest first."""
    pending: list[SignalRow] = []
    consumed: list[SignalRow] = []
    for sig in sorted(signals, key=lambda s: s.id):
        row = SignalRow(
            id=sig.id,
            name=sig.name,
            data=pretty_json(sig.data),
            sent=format_time(sig.created_at, precise=True, day_of=day_of),
            consumed=format_time(sig.consumed_at, precise=True, day_of=day_of) if sig.consumed_by_id else "",
            idempotency_key=sig.idempotency_key,
        )
        (consumed if sig.consumed_by_id else pending).append(row)
    return pending, consumed


def _attempt_note(attempt: StepAttempt, day_of: datetime | None) -> str:
    context = attempt.context or {}
    if attempt.kind == StepKind.SLEEP and context.get("resume_at"):
        resume = parse_datetime(str(context["resume_at"]))
        text = f"until {format_time(resume, precise=True, day_of=day_of)}" if resume else ""
        return text + (" (woken early)" if context.get("woken_early") else "")
    if attempt.kind == StepKind.WORKFLOW and context.get("workflow"):
        return f"child {context['workflow']}" + (f" {context['version']}" if context.get("version") else "")
    return ""


@dataclass
class TimelineBar:
    """One attempt on the time axis, positioned in percent of the axis."""

    left: float
    width: float
    css: str
    title: str
    anchor: str  # the journal row's id, so a click on the bar scrolls to it

    @property
    def style(self) -> str:
        """Position as CSS; formatted here because templates would localize the decimals."""
        return f"left: {self.left:.3f}%; width: {self.width:.3f}%"


@dataclass
class TimelineRow:
    """One durable key: its attempts side by side, so retries and their backoff gaps show."""

    label: str
    kind: str
    bars: list[TimelineBar] = field(default_factory=list)


@dataclass
class Timeline:
    """The run page's picture: rows of bars, axis ticks and a "now" marker."""

    rows: list[TimelineRow]
    ticks: list[tuple[str, str]]  # (CSS left, label)
    now_left: str | None  # CSS left of the "now" line while the run is unfinished
    span: str
    hidden_rows: int = 0


# Tick spacing candidates in seconds: the first that gives at most 6 ticks wins.
_TICK_STEPS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)
MAX_TIMELINE_ROWS = 60


def _planned_end(attempt: StepAttempt, now: datetime, run_end: datetime | None) -> datetime:
    """Where an unfinished attempt's bar ends: the run's end, a sleep's wake time, else now."""
    if attempt.finished_at is not None:
        return attempt.finished_at
    if run_end is not None:
        return run_end
    if attempt.kind == StepKind.SLEEP:
        resume = parse_datetime(str((attempt.context or {}).get("resume_at", "")))
        if resume is not None and resume > now:
            return resume
    return now


def _bar_css(attempt: StepAttempt) -> str:
    if attempt.kind == StepKind.SLEEP:
        return "owf-bar-sleep"
    if attempt.kind != StepKind.RUN:
        # Every other kind waits on something outside the run: a child run, a signal, an event.
        return "owf-bar-failed owf-bar-wait" if attempt.status == StepStatus.FAILED else "owf-bar-wait"
    if attempt.status == StepStatus.COMPLETED:
        return "owf-bar-completed"
    return "owf-bar-failed" if attempt.status == StepStatus.FAILED else "owf-bar-running"


def build_timeline(run: WorkflowRun, rows: list[JournalRow], now: datetime) -> Timeline | None:
    """Lay the journal's attempts out on one time axis; None when no step has started."""
    run_end = run.finished_at if run.is_finished else None
    spans = [
        (row, row.attempt.started_at, _planned_end(row.attempt, now, run_end)) for row in rows if row.attempt.started_at
    ]
    if not spans:
        return None
    origin = min(start for _, start, _ in spans)
    end = max(finish for _, _, finish in spans)
    if run.finished_at is not None:
        end = max(end, run.finished_at)
    elif run.status in CLAIMABLE_STATUSES:
        end = max(end, now)
    total = max((end - origin).total_seconds(), 0.001)

    def percent(moment: datetime) -> float:
        return round(100 * (moment - origin).total_seconds() / total, 3)

    by_key: dict[str, TimelineRow] = {}
    for row, start, finish in spans:
        attempt = row.attempt
        line = by_key.setdefault(attempt.step_name, TimelineRow(attempt.step_name, attempt.kind))
        title = f"{attempt.step_name} · {attempt.kind} attempt {row.number} · {attempt.status} · {row.duration}"
        if row.error_headline:
            title += f" · {row.error_headline}"
        width = percent(finish) - percent(start)
        line.bars.append(TimelineBar(percent(start), width, _bar_css(attempt), title, f"attempt-{attempt.id}"))
    step = next((s for s in _TICK_STEPS if total / s <= 6), _TICK_STEPS[-1])
    ticks = []
    count = 0
    while count * step <= total:
        label = format_duration(timedelta(seconds=count * step)) if count else "0"
        ticks.append((f"{100 * count * step / total:.3f}%", label))
        count += 1
    ordered = list(by_key.values())
    now_left = f"{percent(now):.3f}%" if run.status in CLAIMABLE_STATUSES and now <= end else None
    return Timeline(
        rows=ordered[:MAX_TIMELINE_ROWS],
        ticks=ticks,
        now_left=now_left,
        span=format_duration(end - origin),
        hidden_rows=max(0, len(ordered) - MAX_TIMELINE_ROWS),
    )


# -- actions ------------------------------------------------------------------


@dataclass(frozen=True)
class RunAction:
    """A run operation offered on the run list and the run page (see ``operations.py``)."""

    name: str
    operation: str  # the name in operations.REFUSALS
    label: str
    permission: str  # the model permission it needs: "change" or "add"
    question: str  # the confirmation, "…the selected runs?"
    done: str  # past tense for the report: "Canceled"
    apply: Callable[[Iterable[Any]], operations.BulkResult]
    creates_runs: bool = False

    def refusals(self, runs: Iterable[WorkflowRun]) -> dict[Any, str]:
        """Why the action would skip each of ``runs`` (the runs it would change are absent)."""
        return operations.refusals(self.operation, runs)

    def offered(self, run: WorkflowRun) -> bool:
        """Whether the run page offers it for ``run``."""
        return not self.refusals([run])


ACTIONS: dict[str, RunAction] = {
    action.name: action
    for action in (
        RunAction(
            "cancel",
            "cancel",
            "Cancel",
            "change",
            "Cancel {runs}? A worker executing a run stops at its next step and writes nothing more.",
            "Canceled",
            operations.cancel_many,
        ),
        RunAction(
            "retry_now",
            "retry_now",
            "Retry now",
            "change",
            "Make {runs} due now? A sleep ends early, a retry backoff or a scheduled start is skipped.",
            "Made due now",
            operations.retry_now_many,
        ),
        RunAction(
            "retry_failed",
            "retry_from_failed_step",
            "Retry from failed step",
            "change",
            "Retry {runs} from the failed step? Completed steps keep their outputs and are not run again.",
            "Sent back to pending",
            operations.retry_from_failed_step_many,
        ),
        RunAction(
            "rerun",
            "rerun",
            "Re-run with same input",
            "add",
            "Start a new run of the same workflow and version with the same input as {runs}?",
            "Started a new run for",
            operations.rerun_many,
            creates_runs=True,
        ),
    )
}


def plural(count: int, word: str = "run") -> str:
    """``1 run``, ``3 runs``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def perform_action(
    request: HttpRequest,
    action: RunAction,
    run_ids: Iterable[Any],
    log: Callable[[list[WorkflowRun]], None],
) -> list[Any]:
    """Apply ``action`` to the runs in bulk, report what changed and what was skipped and why.

    ``log(runs)`` records the changes in the admin's history. Returns the
    ids of the runs changed (of the new runs, for an action that creates
    them). A fixed number of queries per chunk of runs, however many.
    """
    result = action.apply(run_ids)
    if result.changed:
        log(list(WorkflowRun.objects.defer(*PAYLOAD_FIELDS).filter(id__in=result.changed)))
    if result.changed:
        if action.creates_runs:
            links = format_html_join(
                ", ", '<a href="{}">{}</a>', ((run_url(new), short_id(new)) for new in result.created)
            )
            messages.success(request, format_html("{} {}: {}.", action.done, plural(len(result.changed)), links))
        else:
            messages.success(request, f"{action.done}: {plural(len(result.changed))}.")
    for reason in sorted(set(result.refused.values())):
        skipped = [run_id for run_id, why in result.refused.items() if why == reason]
        ids = ", ".join(short_id(run_id) for run_id in skipped)
        messages.warning(request, f"{action.label}: skipped {plural(len(skipped))} ({ids}): {reason}.")
    return result.created if action.creates_runs else result.changed
