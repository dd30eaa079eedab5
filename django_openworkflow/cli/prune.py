"""``manage.py workflows prune``: delete finished runs past their retention (see ``worker/prune.py``)."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..durations import parse_duration
from ..formatting import format_table, plural, printable
from ..worker.prune import prune


def _duration(value: str) -> timedelta:
    try:
        duration = parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if duration <= timedelta(0):
        raise argparse.ArgumentTypeError(f"must be longer than zero, got {value}")
    return duration


def _batch_size(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def add_prune_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    prune_parser = sub.add_parser(
        "prune", parents=[common], help="delete finished runs past their retention, with their journals"
    )
    prune_parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
    prune_parser.add_argument(
        "--older-than",
        type=_duration,
        default=None,
        metavar="DURATION",
        help="also delete finished runs that finished longer ago than this (e.g. 90d), whatever their retention",
    )
    prune_parser.add_argument(
        "--batch-size", type=_batch_size, default=None, metavar="N", help="runs per transaction (default 500)"
    )
    prune_parser.add_argument(
        "--yes", "--no-input", dest="yes", action="store_true", help="do not ask before deleting with --older-than"
    )


def prune_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows prune``: delete expired runs (and old events); print how many per workflow."""
    older_than: timedelta | None = options.get("older_than")
    dry_run = bool(options.get("dry_run"))
    if older_than is not None and not dry_run and not options.get("yes"):
        if not sys.stdin.isatty():
            raise CommandError("--older-than deletes runs whatever their retention: add --yes to confirm")
        answer = input(f"Delete every finished run that finished more than {older_than} ago? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("nothing deleted")
    try:
        result = prune(older_than=older_than, batch_size=options.get("batch_size"), dry_run=dry_run)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    runs = dict(sorted(result.runs.items()))
    if options.get("json"):
        import json

        out.write(json.dumps({"dry_run": dry_run, "runs": runs, "events": result.events}))
        return
    verb = "would delete" if dry_run else "deleted"
    total = sum(runs.values())
    if runs:
        out.write(format_table(("workflow", "runs"), [(printable(name), count) for name, count in runs.items()]))
    out.write(f"{verb} {plural(total, 'run')} and {plural(result.events, 'event')}")
