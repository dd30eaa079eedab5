"""``workflows list`` and ``workflows show``: runs and one run's journal, as tables or JSON.

The status column is the display status (``retrying``, ``waiting`` ... see
:class:`~django_openworkflow.states.DisplayStatus`) with what goes with it:
why a run retries, what it waits for, when it wakes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone

from ..client.listing import attempt_json, attribute_filters, run_filter, run_json
from ..client.subjects import parse_subject
from ..definitions.flow import DEFAULT_QUEUE, QUEUE_NAME
from ..definitions.payload import check_text
from ..definitions.retention import expires_at
from ..errors import InvalidArgument, PayloadError
from ..formatting import (
    LINES,
    attempt_result,
    blocked_line,
    compact_json,
    concurrency_text,
    elapsed,
    error_line,
    executing_hint,
    format_available,
    format_duration,
    format_table,
    format_time,
    is_blocked,
    numbered,
    plural,
    printable,
    rate_limit_text,
    state_hint,
    workflow_attempts,
)
from ..models import WorkflowRun
from ..store import queries, run_states
from ..store.attributes import attributes_of, run_attributes
from .common import command_error, print_json, read_json_option, resolve_run


def list_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows list``: the newest runs, newest first."""
    where = filter_from_options(options)
    found = queries.list_runs(where=where, limit=options["limit"])
    states = run_states.states_of(found)
    if options["json"]:
        attributes = attributes_of(run.id for run in found)
        print_json(
            out, [run_json(run, payloads=False, state=states[run.id], attributes=attributes[run.id]) for run in found]
        )
        return
    if not found:
        out.write("No runs.")
        return
    now = timezone.now()
    # The queue and priority columns only when they tell something: most projects use one queue, no priorities.
    queued = any(run.queue != DEFAULT_QUEUE for run in found)
    prioritized = any(run.priority for run in found)
    flow_headers = ("queue",) * queued + ("priority",) * prioritized
    out.write(
        format_table(
            ("id", "workflow", "version", "status", *flow_headers, "attempts", "created", "duration"),
            [
                (
                    run.id,
                    run.workflow_name,
                    run.version or "-",
                    _list_status(run, states[run.id], now),
                    *(run.queue,) * queued,
                    *(run.priority or "",) * prioritized,
                    workflow_attempts(run),
                    format_time(run.created_at),
                    format_duration(elapsed(run.started_at, run.finished_at, now)) or "-",
                )
                for run in found
            ],
        )
    )


def filter_from_options(options: dict[str, Any]) -> queries.RunFilter:
    """The runs ``--status``, ``--workflow``, ``--queue``, ``--input``, ``--subject`` and ``--attribute`` choose.

    For ``list`` and ``--all-matching``.
    """
    statuses = [s.strip() for value in options["status"] or [] for s in value.split(",") if s.strip()]
    unknown = [s for s in statuses if s not in queries.DISPLAY_STATUSES]
    if unknown:
        raise CommandError(f"unknown status {unknown[0]!r}; choose from {', '.join(queries.DISPLAY_STATUSES)}")
    if options["workflow"]:
        try:
            check_text(options["workflow"], "--workflow")  # a NUL is an error in a PostgreSQL query
        except PayloadError as exc:
            raise command_error(exc) from None
    queue = options.get("queue")
    if queue is not None and not QUEUE_NAME.match(queue):
        raise CommandError(
            printable(f"--queue {queue!r:.80} is not a queue name: 1 to 64 letters, digits, '_', '.', ':' or '-'")
        )
    pattern = None if options.get("input") is None else read_json_option(options["input"], "--input")
    try:
        subject = None if options.get("subject") is None else parse_subject(options["subject"], "--subject")
    except InvalidArgument as exc:
        raise CommandError(printable(str(exc))) from None
    try:
        attributes = attribute_filters(options.get("attribute") or [], "--attribute")
        return run_filter(
            status=statuses,
            workflow=options["workflow"] or None,
            queue=queue,
            input_contains=pattern,
            subject=subject,
            attributes=attributes,
            attributes_as_text=True,
        )
    except InvalidArgument as exc:
        # The other options were checked above.
        what = "--attribute" if exc.argument == "attributes" else "--input"
        raise CommandError(printable(f"{what}: {exc}")) from None


def attributes_text(attributes: dict[str, Any]) -> str:
    """``amount=10.25, region=eu``: a run's attributes on one line (datetimes as the CLI shows times)."""
    return ", ".join(
        f"{name}={format_time(value) if isinstance(value, datetime) else value}" for name, value in attributes.items()
    )


def expiry_text(run: WorkflowRun) -> str:
    """When retention deletes the run: a time, ``never``, or how long after it finishes."""
    if run.retention is None:
        return "never (kept until deleted by hand)"
    expires = expires_at(run.finished_at, run.retention)
    if expires is None:
        return f"{format_duration(run.retention)} after it finishes"
    return format_time(expires)


def _list_status(run: WorkflowRun, state: run_states.RunState, now: Any) -> str:
    """The display status, with why it retries or what it waits for, or ``(blocked)`` for a concurrency place."""
    if state.status in ("retrying", "waiting"):
        return f"{state.status} · {state_hint(state.status, run, state.error, state.wait, now)}"
    return f"{state.status} (blocked)" if is_blocked(run) else str(state.status)


def show_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows show RUN_ID``: the run, its payloads and its journal as a table."""
    run = resolve_run(options["run_id"])
    attempts = queries.journal(run.id)
    journal = numbered(attempts)
    state = run_states.state_of(run)
    if options["json"]:  # the API's run, with its steps as GET /runs/<id>/steps gives them
        print_json(out, {**run_json(run, state=state), "steps": [attempt_json(a, n) for a, n in journal]})
        return
    now = timezone.now()
    hint = state_hint(state.status, run, state.error, state.wait, now) or executing_hint(run, attempts, now)
    failed = f" ({run.attempts} failed)" if run.attempts else ""
    fields = [
        ("status", state.status + (f" ({hint})" if hint else "")),
        ("workflow", run.workflow_name + (f" {run.version}" if run.version else "")),
        ("attempts", f"{workflow_attempts(run)}{failed}"),
        ("worker", run.worker_id or "-"),
        ("created", format_time(run.created_at)),
        ("started", format_time(run.started_at) or "-"),
        ("finished", format_time(run.finished_at) or "-"),
        ("duration", format_duration(elapsed(run.started_at, run.finished_at, now)) or "-"),
    ]
    waiting = blocked_line(run, now)
    if waiting:
        fields.append(("waiting", waiting))
    else:
        fields.append(("available at", format_available(run.available_at)))
    fields += [
        ("deadline", format_time(run.deadline_at) or "-"),
        ("idempotency key", run.idempotency_key or "-"),
        ("queue", run.queue),
        ("priority", str(run.priority)),
    ]
    if run.concurrency_key:
        fields.append(("concurrency", concurrency_text(run)))
    if run.rate_key:
        fields.append(("rate limit", rate_limit_text(run)))
    if run.debounce_key:
        fields.append(("debounce key", run.debounce_key))
    if run.subject_type:
        fields.append(("subject", f"{run.subject_type}:{run.subject_id}"))
    attributes = run_attributes(run.id)
    if attributes:
        fields.append(("attributes", attributes_text(attributes)))
    fields.append(("expires", expiry_text(run)))
    if run.erased_at:
        who = f" by {run.erased_by}" if run.erased_by else ""
        fields.append(("payloads erased", f"on {format_time(run.erased_at)}{who}"))
    if run.rerun_of_id or run.rerun_from_step:
        since = f" from step {run.rerun_from_step!r} (the steps before it copied)" if run.rerun_from_step else ""
        fields.append(("re-run of", f"{run.rerun_of_id or 'a deleted run'}{since}"))
    fields.append(("input", compact_json(run.input, 100)))
    if run.output is not None:
        fields.append(("output", compact_json(run.output, 100)))
    if run.error is not None:
        fields.append(("last error" if state.status == "retrying" else "error", error_line(run.error)))
    out.write(f"Run {run.id}")
    out.write("\n".join(f"  {label:<17}{printable(str(value))}" for label, value in fields))
    out.write("")
    out.write(f"Journal: {plural(len(journal), 'step attempt')}")
    if journal:
        day = run.created_at
        # An attempt left open when the run ended (canceled mid-sleep) stopped with the run.
        run_end = run.finished_at if run.is_finished else None
        out.write(
            format_table(
                ("#", "step", "kind", "status", "attempt", "started", "finished", "duration", "output or error"),
                [
                    (
                        index,
                        attempt.step_name,
                        attempt.kind,
                        attempt.status + (" (copied)" if attempt.copied_from else ""),
                        number,
                        format_time(attempt.started_at, precise=True, day_of=day),
                        format_time(attempt.finished_at, precise=True, day_of=day) or "-",
                        format_duration(elapsed(attempt.started_at, attempt.finished_at, run_end or now)),
                        attempt_result(attempt),
                    )
                    for index, (attempt, number) in enumerate(journal, start=1)
                ],
            )
        )
    if isinstance(run.error, dict) and run.error.get("traceback"):
        out.write("")
        out.write(printable(str(run.error["traceback"]).rstrip(), LINES))
