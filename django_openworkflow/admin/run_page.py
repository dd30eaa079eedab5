"""A run's page: summary, payloads, the executing hint, timeline, journal and signals.

:func:`run_page` gathers what the template shows; the actions it offers and
the signal form depend on the user's permissions and are added by the
ModelAdmin (``options.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.translation import gettext

from .. import formatting as fmt
from ..client.reruns import from_step_refusals
from ..definitions.retention import expires_at
from ..models import Signal, StepAttempt, WorkflowRun
from ..states import WAITING_KINDS, DisplayStatus, RunStatus, StepKind, StepStatus, display_state
from ..store import get_backend, progress, queries
from ..store.attributes import run_attributes
from .journal import add_task_activity, journal_rows
from .markup import attribute_runs_url, badge, status_badge, subject_link, subject_runs_url
from .timeline import build_timeline
from .tracebacks import fold

RERUNS_SHOWN = 10
"""Re-runs of a run its page links to, newest first."""


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
            data=fmt.pretty_json(sig.data),
            sent=fmt.format_time(sig.created_at, precise=True, day_of=day_of),
            consumed=fmt.format_time(sig.consumed_at, precise=True, day_of=day_of) if sig.consumed_by_id else "",
            idempotency_key=sig.idempotency_key,
        )
        (consumed if sig.consumed_by_id else pending).append(row)
    return pending, consumed


def expiry(run: WorkflowRun, now: datetime) -> tuple[str, str]:
    """When retention deletes the run: (a time, a note), either possibly empty."""
    if run.retention is None:
        return "", gettext("never: kept until deleted by hand")
    expires = expires_at(run.finished_at, run.retention)
    if expires is None:
        return "", gettext("when finished, after %(duration)s") % {"duration": fmt.format_duration(run.retention)}
    return fmt.format_time(expires), gettext("due for pruning") if expires <= now else ""


def erasure_line(run: WorkflowRun) -> str:
    """``on <time> by <who>`` for a run whose payloads ``forget`` erased; empty for any other."""
    if run.erased_at is None:
        return ""
    line = gettext("on %(time)s") % {"time": fmt.format_time(run.erased_at)}
    return line + (" " + gettext("by %(who)s") % {"who": run.erased_by} if run.erased_by else "")


def _cause(run: WorkflowRun, attempts: list[StepAttempt]) -> tuple[str, str]:
    """Where the run's error started: (what, its traceback), from the failed step's last attempt.

    The run's own traceback is the workflow function's, through the engine;
    the user's code raised in the step, whose traceback the journal keeps. A
    run failed by its child: the child's failed step (one query), else the child's own traceback.
    """
    error = run.error if isinstance(run.error, dict) else {}
    child = error.get("child_error")
    if isinstance(child, dict) and error.get("child_run_id"):
        where = gettext("child run %(id)s") % {"id": fmt.short_id(error["child_run_id"])}
        step = child.get("step")
        attempt = queries.last_failed_attempt(error["child_run_id"], step) if step else None
        traceback = _traceback(attempt.error if attempt is not None else None) or _traceback(child)
        return (f"{where}, " + gettext("step %(step)s") % {"step": repr(step)} if step else where), traceback
    step = error.get("step")
    failed = [a for a in attempts if a.step_name == step and a.status == StepStatus.FAILED]
    if step and failed and _traceback(failed[-1].error):
        return gettext("step %(step)s") % {"step": repr(step)}, _traceback(failed[-1].error)
    return "", ""


def _traceback(error: Any) -> str:
    return str(error.get("traceback") or "") if isinstance(error, dict) else ""


def error_block(run: WorkflowRun, attempts: list[StepAttempt]) -> dict[str, Any]:
    """The run's error as the page shows it: headline, the user's frame first, tracebacks with package frames folded."""
    headline, traceback, rest = fmt.split_error(run.error, hide=("child_error",))
    cause_of, cause_traceback = _cause(run, attempts)
    folded, cause = fold(traceback), fold(cause_traceback)
    child = (run.error or {}).get("child_error") if isinstance(run.error, dict) else None
    return {
        "error_headline": headline,
        "error_child": fmt.error_line(child) if isinstance(child, dict) else "",
        "error_raised_in": cause.raised_in or folded.raised_in,
        "error_cause_of": cause_of,
        "error_cause": cause.parts,
        "error_traceback": folded.parts,
        "error_rest": rest,
    }


def run_page(run: WorkflowRun, now: datetime) -> dict[str, Any]:
    """The run page's context: everything about ``run`` that needs no permission to show."""
    attempts = queries.journal(run.id)
    run_end = run.finished_at if run.is_finished else None
    rows = journal_rows(attempts, now, day_of=run.created_at, run_end=run_end)
    if any(row.wait is not None and "approval" in (row.attempt.context or {}) for row in rows):
        add_task_activity(rows, queries.approval_activity(run.id), run.created_at)
    waits = [a for a in attempts if a.kind in WAITING_KINDS and a.status == StepStatus.RUNNING]
    state = display_state(run.status, run.worker_id, has_note=run.error is not None, waiting=bool(waits))
    wait = waits[-1] if state == DisplayStatus.WAITING else None
    pending_signals, consumed_signals = signal_rows(queries.run_signals(run.id), day_of=run.created_at)
    parent_step = run.parent_step_attempt
    refusals = from_step_refusals(attempts)
    first_attempts = {attempt.step_name: attempt.id for attempt in reversed(attempts)}
    return {
        "title": f"{run.workflow_name} · {fmt.short_id(run.id)}",
        "run": run,
        "short_id": fmt.short_id(run.id),
        "status_badge": badge(state),
        "display_status": state,
        "wake_hint": fmt.state_hint(state, run, run.error, wait, now),
        "available_hint": fmt.wake_hint(run, now),
        "signal_wait": str((wait.context or {}).get("signal") or wait.step_name)
        if wait is not None and wait.kind == StepKind.SIGNAL and "approval" not in (wait.context or {})
        else "",  # an approval's wait takes no signal: it is decided in the Inbox
        "workflow_attempts": fmt.workflow_attempts(run),
        "executing": fmt.executing_hint(run, attempts, now),
        "blocked_line": fmt.blocked_line(run, now),
        "concurrency_parked": fmt.parked_place(run),
        "rate_text": fmt.rate_text(run),
        "times": {
            "created": fmt.format_time(run.created_at),
            "started": fmt.format_time(run.started_at),
            "finished": fmt.format_time(run.finished_at),
            "available": fmt.format_available(run.available_at),
            "deadline": fmt.format_time(run.deadline_at),
            "cancel_requested": fmt.format_time(run.cancel_requested_at),
            "duration": fmt.format_duration(fmt.elapsed(run.started_at, run.finished_at, now)),
        },
        "expires": expiry(run, now),
        "erased": erasure_line(run),
        "subject_link": subject_link(run.subject_type, run.subject_id or "") if run.subject_type else "",
        "subject_runs_url": subject_runs_url(run.subject_type, run.subject_id or "") if run.subject_type else "",
        "attributes": [
            (
                name,
                fmt.format_time(value) if isinstance(value, datetime) else str(value),
                attribute_runs_url(name, value),
            )
            for name, value in run_attributes(run.id).items()
        ],
        "successor_id": get_backend().successor_id(run.id) if run.status == RunStatus.CONTINUED else None,
        "parent_run": parent_step.workflow_run if parent_step is not None else None,
        "parent_step": parent_step,
        "children": [
            (a.step_name, child, status_badge(child.status, child.worker_id))
            for a in attempts
            if (child := a.child_workflow_run) is not None
        ],
        "journal": rows,
        # Copied rows ran in the run this one re-runs, at its times: the journal shows them, the timeline does not.
        "timeline": build_timeline(run, [row for row in rows if row.attempt.copied_from is None], now),
        "reruns": queries.runs().filter(rerun_of=run.id).only("id", "workflow_name", "rerun_from_step")[:RERUNS_SHOWN],
        "rerun_steps": {attempt_id for step, attempt_id in first_attempts.items() if not refusals.get(step)},
        "input_json": fmt.pretty_json(run.input),
        "output_json": fmt.pretty_json(run.output) if run.output is not None else "",
        **error_block(run, attempts),
        "pending_signals": pending_signals,
        "consumed_signals": consumed_signals,
        **progress_block(run.id),
    }


STREAM_CHUNKS_SHOWN = 5
"""How many of a stream's last chunks the run page shows."""
KEYS_SHOWN = 50
"""How many published keys the run page shows (the first by name)."""
STREAMS_SHOWN = 20
"""How many streams the run page shows (the first by name): each costs a query, at every refresh."""


def progress_block(run_id: Any) -> dict[str, Any]:
    """What the run published (``ctx.publish``) and the last chunks of its streams (``ctx.stream``), capped."""
    values = [(key, fmt.compact_json(value)) for key, value in progress.published_values(run_id, KEYS_SHOWN).items()]
    streams = [
        progress.StreamSummary(s.name, s.count, [(at, fmt.compact_json(chunk)) for at, chunk in s.last])
        for s in progress.stream_summaries(run_id, STREAM_CHUNKS_SHOWN, STREAMS_SHOWN)
    ]
    more = 0
    if len(values) == KEYS_SHOWN or len(streams) == STREAMS_SHOWN:  # counted only when a cap is reached
        keys, names = progress.progress_counts(run_id)
        more = keys - len(values) + names - len(streams)
    return {"progress_values": values, "progress_streams": streams, "progress_more": more}
