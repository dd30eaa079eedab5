"""The run page's timeline: every step attempt as a bar on one time axis, in plain HTML and CSS.

Retries sit side by side on their durable key's row, so failures and the
backoff between them show; sleeps and waits are hatched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext

from ..formatting import format_duration, kind_label, status_label
from ..models import CLAIMABLE_STATUSES, StepAttempt, StepKind, StepStatus, WorkflowRun
from .journal import JournalRow


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
        line = by_key.setdefault(attempt.step_name, TimelineRow(attempt.step_name, kind_label(attempt.kind)))
        title = gettext("%(step)s · %(kind)s attempt %(number)s · %(status)s · %(duration)s") % {
            "step": attempt.step_name,
            "kind": kind_label(attempt.kind),
            "number": row.number,
            "status": status_label(attempt.status),
            "duration": row.duration,
        }
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
