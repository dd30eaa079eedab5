"""``manage.py workflows``: list, show, start, cancel, retry, rerun, signal, count, prune and forget runs; API tokens;
queues (pause, resume) and workers; schedules (trigger now, backfill).

The management command only builds the parser (:func:`add_arguments`) and calls :func:`dispatch`.
Every subcommand prints a human-readable answer, or JSON with ``--json``; every error is a
``CommandError`` with one clear line, which Django turns into a non-zero exit. A run in JSON has one
shape, the HTTP API's (:func:`~.client.listing.run_json`): ``list`` prints a list of them, the other
subcommands one. What comes from data (names, keys, payloads, error messages) is printed with its
control characters escaped (:func:`~.formatting.printable`), so it cannot drive the operator's terminal.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..client import operations
from ..client.handle import RunHandle, send_signal
from ..client.listing import attribute_filters, run_json
from ..client.runs import start_run
from ..client.subjects import find_subject
from ..definitions.registry import registry
from ..durations import parse_duration
from ..errors import (
    OpenWorkflowError,
    OperationRefused,
    ResultTimeout,
    RunNotFound,
    WorkflowCanceled,
    WorkflowFailed,
)
from ..formatting import (
    error_line,
    json_text,
    printable,
)
from ..models import RunStatus, WorkflowRun
from ..store import queries
from .common import command_error, print_json, read_json_option, resolve_run
from .forget import add_forget_parser, forget_command
from .input_index import add_input_index_parser, input_index_command
from .keys import add_rotate_keys_parser, rotate_keys_command
from .matching import add_filter_options, add_matching_options, matching_command, wants_matching
from .payload_files import add_payload_files_parser, payload_files_command
from .prune import add_prune_parser, prune_command
from .queues import add_queue_parsers, queue_command, queues_command, workers_command
from .replay import add_check_replay_parser, check_replay_command
from .runs_view import list_command, show_command
from .schedules import add_schedule_parsers, schedule_command, schedules_command
from .stats import add_stats_parser, stats_command
from .tokens import add_token_parser, token_command

Handler = Callable[[dict[str, Any], OutputWrapper], None]


# -- arguments ----------------------------------------------------------------


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def _seconds(value: str) -> float:
    """A duration as the other options write it (``30s``, ``2m``, ``1h30m``); a bare number is seconds."""
    try:
        number = float(value)
    except ValueError:
        try:
            return parse_duration(value).total_seconds()
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc} (write it as 30s, 2m or 1h30m)") from None
    if not math.isfinite(number) or number < 0:
        raise argparse.ArgumentTypeError(
            f"must be a finite, non-negative number of seconds or a duration (30s), got {value}"
        )
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands and their options."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of text")
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)

    listing = sub.add_parser("list", parents=[common], help="the newest runs")
    add_filter_options(listing)
    listing.add_argument("--limit", type=_positive_int, default=20, metavar="N", help="at most N runs (default 20)")

    show = sub.add_parser("show", parents=[common], help="one run and its journal")
    show.add_argument("run_id", metavar="RUN_ID", help="a run id, or its first 8 or more characters")

    start = sub.add_parser("start", parents=[common], help="start a run of a registered workflow")
    start.add_argument("name", metavar="NAME", help="the workflow's name")
    start.add_argument("--input", default=None, metavar="JSON", help="the run's input as JSON (default: null)")
    start.add_argument("--version", default=None, help="the workflow version (default: the highest registered)")
    start.add_argument("--idempotency-key", default=None, metavar="KEY", help="start at most one run with this key")
    start.add_argument(
        "--subject",
        default=None,
        metavar="APP_LABEL.MODEL:PK",
        help="link the run to this object (it must exist), e.g. shop.order:42",
    )
    start.add_argument(
        "--attribute",
        action="append",
        metavar="NAME=VALUE",
        help="a value of one of the workflow's typed attributes, as text parsed as its type: region=eu, "
        "amount=10.25, due=2026-12-01T09:00:00Z; repeat for several",
    )
    start.add_argument("--wait", action="store_true", help="wait for the run to finish and print its output")
    start.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="DURATION",
        help="with --wait: give up after this long, e.g. 30s or 2m (a bare number is seconds)",
    )

    cancel = sub.add_parser("cancel", parents=[common], help="cancel a pending or running run")
    cancel.add_argument("run_id", metavar="RUN_ID", nargs="?")
    add_matching_options(cancel)

    retry = sub.add_parser("retry", parents=[common], help="make a parked run due now, or retry a failed run")
    retry.add_argument("run_id", metavar="RUN_ID", nargs="?")
    retry.add_argument(
        "--from-failed-step",
        action="store_true",
        help="send a failed run back to pending; completed steps keep their outputs",
    )
    add_matching_options(retry)

    rerun = sub.add_parser(
        "rerun", parents=[common], help="start a new run of a run's workflow and version with the same input"
    )
    rerun.add_argument("run_id", metavar="RUN_ID", nargs="?", help="a run id, or its first 8 or more characters")
    rerun.add_argument(
        "--from-step",
        default=None,
        metavar="NAME",
        help="start from this step: the steps recorded before it keep their results (`workflows show` lists them)",
    )
    add_matching_options(rerun)

    signal = sub.add_parser(
        "signal", parents=[common], help="send a signal to a run (buffered if it does not wait yet)"
    )
    signal.add_argument("run_id", metavar="RUN_ID", help="a run id, or its first 8 or more characters")
    signal.add_argument("name", metavar="NAME", help="the signal's name, as the workflow's wait_for_signal() gives it")
    signal.add_argument("--data", default=None, metavar="JSON", help="the signal's data as JSON (default: null)")
    signal.add_argument("--idempotency-key", default=None, metavar="KEY", help="deliver at most once with this key")

    for add_parser in (
        add_stats_parser,
        add_prune_parser,
        add_input_index_parser,
        add_rotate_keys_parser,
        add_payload_files_parser,
        add_forget_parser,
        add_token_parser,
        add_check_replay_parser,
        add_queue_parsers,
        add_schedule_parsers,
    ):
        add_parser(sub, common)


def dispatch(options: dict[str, Any], out: OutputWrapper) -> None:
    """Run the chosen subcommand."""
    SUBCOMMANDS[options["subcommand"]](options, out)


# -- subcommands ------------------------------------------------------------------


def start_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows start NAME``: start a run (and with ``--wait``, wait for its output)."""
    input_value = read_json_option(options["input"], "--input")
    name, key = options["name"], options["idempotency_key"]
    try:
        subject = None if options["subject"] is None else find_subject(options["subject"], "--subject")
        given = attribute_filters(options.get("attribute") or [], "--attribute")
        attributes = registry.find(name, options["version"]).attribute_values_from_json(given)
        handle = start_run(
            name,
            input_value,
            version=options["version"],
            idempotency_key=key,
            subject=subject,
            attributes=attributes,
        )
    except (OpenWorkflowError, ValueError, OverflowError) as exc:
        raise command_error(exc) from None
    run = handle.fetch()
    if not options["wait"]:
        if options["json"]:  # the API's run, and whether this start created it, as POST /runs says
            print_json(out, {**run_json(run), "created": handle.created})
        elif not handle.created:
            out.write(printable(f"Run {run.id} of {run.workflow_name} already exists for idempotency key {key!r}."))
        else:
            out.write(
                printable(f"Started run {run.id} of {run.workflow_name}" + (f" {run.version}." if run.version else "."))
            )
        return
    output = _wait(handle, options["timeout"])
    if options["json"]:
        print_json(out, {**run_json(handle.fetch()), "created": handle.created})
    else:
        out.write(printable(f"Run {run.id} of {run.workflow_name} completed. Output:"))
        out.write(json_text(output, indent=2))


def _wait(handle: RunHandle, timeout: float | None) -> Any:
    try:
        return handle.result(timeout=timeout)
    except WorkflowFailed as exc:
        raise CommandError(f"run {handle.id} failed: {error_line(exc.error)}") from None
    except WorkflowCanceled:
        raise CommandError(f"run {handle.id} was canceled") from None
    except ResultTimeout:
        raise CommandError(
            f"run {handle.id} did not finish within {timeout:g} s (it goes on; is a worker running?)"
        ) from None


def cancel_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows cancel RUN_ID`` (or ``--all-matching``)."""
    if wants_matching(options):
        return matching_command("cancel", options, out)
    run = resolve_run(options["run_id"])
    _apply(operations.cancel, run)
    if options["json"]:
        print_json(out, run_json(_refetch(run)))
    else:
        out.write(f"Canceled run {run.id}.")


def retry_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows retry RUN_ID``: wake a parked run; ``--from-failed-step``: retry a failed one."""
    if wants_matching(options):
        operation = "retry_from_failed_step" if options["from_failed_step"] else "retry_now"
        return matching_command(operation, options, out)
    run = resolve_run(options["run_id"])
    if options["from_failed_step"]:
        _apply(operations.retry_from_failed_step, run)
        message = f"Run {run.id} is pending again; it resumes at its failed step."
    elif run.status == RunStatus.FAILED:
        raise CommandError(
            f"run {run.id} has failed, and retry alone only wakes a parked run: resume it at its failed step with"
            f" `workflows retry --from-failed-step {run.id}`, or start it again from the start with"
            f" `workflows rerun {run.id}`"
        )
    else:
        _apply(operations.retry_now, run)
        message = f"Run {run.id} is due now."
    if options["json"]:
        print_json(out, run_json(_refetch(run)))
    else:
        out.write(message)


def rerun_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows rerun RUN_ID [--from-step NAME]``: a new run of the same workflow, version and input.

    The run itself stays. ``--from-step``: the new run starts with a copy of
    the steps recorded before that one, which do not run again.
    ``--all-matching``: a re-run of every run a filter matches.
    """
    if wants_matching(options):
        if options.get("from_step"):
            raise CommandError("--from-step re-runs one run: give its RUN_ID instead of --all-matching")
        return matching_command("rerun", options, out)
    run = resolve_run(options["run_id"])
    step = options.get("from_step")
    try:
        new_id = operations.rerun(run.id) if step is None else operations.rerun_from_step(run.id, step)
    except OperationRefused as exc:
        raise CommandError(printable(str(exc))) from None
    except RunNotFound:  # deleted between the lookup and the rerun
        raise CommandError(f"no workflow run with id {run.id}") from None
    new = _refetch(run, new_id)
    if options["json"]:
        print_json(out, run_json(new))
    else:
        since = "" if step is None else f" from step {step!r} (the steps before it copied)"
        out.write(printable(f"Started run {new.id} of {new.workflow_name}, a re-run of run {run.id}{since}."))


def _refetch(run: WorkflowRun, run_id: Any = None) -> WorkflowRun:
    """The run as it is now (or the run ``run_id``), after an operation; CommandError if it was deleted meanwhile."""
    found = queries.runs().filter(id=run_id or run.id).first()
    if found is None:
        raise CommandError(f"no workflow run with id {run_id or run.id}")
    return found


def _apply(operation: Callable[[Any], Any], run: WorkflowRun) -> None:
    """Run an operation; its refusal becomes the command's one-line error, with the reason every front door gives."""
    try:
        operation(run.id)
    except OperationRefused as exc:
        raise CommandError(printable(str(exc))) from None


def signal_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows signal RUN_ID NAME``: send a signal; says whether a waiting step took it or it is buffered."""
    data = read_json_option(options["data"], "--data")
    run = resolve_run(options["run_id"])
    name = options["name"]
    try:
        delivered = send_signal(run.id, name, data, options["idempotency_key"])
    except RunNotFound:  # deleted between the lookup and the send
        raise CommandError(f"no workflow run with id {run.id}") from None
    except (OpenWorkflowError, ValueError) as exc:  # SignalError (the run finished), PayloadError, a bad key
        raise command_error(exc) from None
    if options["json"]:
        print_json(
            out, {"id": str(run.id), "signal": name, "delivered": delivered, "buffered": not delivered, "data": data}
        )
    elif delivered:
        out.write(f"Signal {name!r} delivered to run {run.id}: a waiting step took it.")
    else:
        out.write(f"Signal {name!r} buffered for run {run.id}: the first wait for it will take it.")


SUBCOMMANDS: dict[str, Handler] = {
    "list": list_command,
    "show": show_command,
    "start": start_command,
    "cancel": cancel_command,
    "retry": retry_command,
    "rerun": rerun_command,
    "signal": signal_command,
    "stats": stats_command,
    "check-replay": check_replay_command,
    "prune": prune_command,
    "input-index": input_index_command,
    "rotate-keys": rotate_keys_command,
    "payload-files": payload_files_command,
    "forget": forget_command,
    "token": token_command,
    "queues": queues_command,
    "queue": queue_command,
    "workers": workers_command,
    "schedules": schedules_command,
    "schedule": schedule_command,
}
