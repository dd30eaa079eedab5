"""``manage.py workflows stats``: run counts by workflow and status, or unfinished runs by queue."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from django.core.management.base import OutputWrapper
from django.utils import timezone

from ..formatting import format_table, json_text
from ..store import queries


def add_stats_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    stats = sub.add_parser("stats", parents=[common], help="run counts by workflow and status")
    stats.add_argument(
        "--by-queue",
        action="store_true",
        help="unfinished runs by queue instead: due now, scheduled, blocked on concurrency, running, parked",
    )


def _print_json(out: OutputWrapper, value: Any) -> None:
    out.write(json_text(value, indent=2))


def stats_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows stats``: how many runs of each workflow are in each status; ``--by-queue``: of each queue."""
    if options.get("by_queue"):
        _queue_stats(options, out)
        return
    rows = queries.stats_by_workflow()
    named = [(r.workflow_name, r.counts, r.total) for r in rows]
    _count_table(options, out, "workflow", queries.DISPLAY_STATUSES, named, "No runs.")


def _queue_stats(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows stats --by-queue``: each queue's unfinished runs, by what they wait for."""
    rows = queries.stats_by_queue(timezone.now())
    named = [(r.queue, r.counts, r.total) for r in rows]
    if _count_table(options, out, "queue", queries.QUEUE_COLUMNS, named, "No unfinished runs."):
        out.write("")
        out.write(
            "due: claimable now; scheduled: pending, due later; blocked: waiting for a concurrency place;"
            " running: held by a worker; parked: sleeping, waiting or backing off."
        )


def _count_table(
    options: dict[str, Any],
    out: OutputWrapper,
    label: str,
    columns: Sequence[str],
    rows: list[tuple[str, dict[str, int], int]],
    empty: str,
) -> bool:
    """Counts per name (a workflow, a queue) as JSON or as a table with an "(all)" row; True if a table."""
    if options["json"]:
        _print_json(out, [{label: name, **counts, "total": total} for name, counts, total in rows])
        return False
    if not rows:
        out.write(empty)
        return False
    totals = [sum(counts[c] for _, counts, _ in rows) for c in columns]
    out.write(
        format_table(
            (label, *columns, "total"),
            [(name, *(counts[c] for c in columns), total) for name, counts, total in rows]
            + [("(all)", *totals, sum(totals))],
        )
    )
    return True
