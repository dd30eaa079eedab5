"""``manage.py workflows schedules`` and ``schedule trigger|backfill NAME``: cron schedules, and runs on demand.

``schedules`` lists the schedules declared in code with their rows' state
(paused, last and next tick, overlap policy). ``schedule trigger NAME``
starts a run now, outside the cadence; ``schedule backfill NAME --start
--end`` starts the runs of the past ticks in a range that have none
(``client/schedules.py`` says how; times without an offset are read in
the schedule's time zone).
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..client.schedules import BACKFILL_LIMIT, backfill_schedule, schedule_states, trigger_schedule
from ..errors import InvalidArgument
from ..formatting import format_table, format_time, printable
from .common import print_json


def add_schedule_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser("schedules", parents=[common], help="the cron schedules declared in code, paused or not")
    schedule = sub.add_parser("schedule", help="start a schedule's run now, or the runs of past ticks")
    actions = schedule.add_subparsers(dest="schedule_action", metavar="ACTION", required=True)
    trigger = actions.add_parser("trigger", parents=[common], help="start a run now, outside the schedule's cadence")
    trigger.add_argument("name", metavar="NAME", help="the workflow's name")
    backfill = actions.add_parser(
        "backfill",
        parents=[common],
        help=f"start the runs of the ticks in [start, end) that have none (≤ {BACKFILL_LIMIT})",
    )
    backfill.add_argument("name", metavar="NAME", help="the workflow's name")
    backfill.add_argument(
        "--start", required=True, metavar="TIME", help="ISO 8601, included; without an offset, in the schedule's zone"
    )
    backfill.add_argument("--end", required=True, metavar="TIME", help="ISO 8601, excluded")


def schedules_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows schedules``."""
    found = schedule_states()
    if options["json"]:
        print_json(out, found)
        return
    if not found:
        out.write("No workflow declares a schedule.")
        return
    table = [
        (
            item["name"],
            item["cron"],
            item["timezone"] or "-",
            item["overlap"],
            "paused" if item["paused"] else "active",
            format_time(datetime.fromisoformat(item["next_tick_at"])) if item["next_tick_at"] else "- (no worker yet)",
        )
        for item in found
    ]
    out.write(format_table(("workflow", "cron", "time zone", "overlap", "state", "next tick"), table))


def schedule_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows schedule trigger|backfill NAME``."""
    try:
        if options["schedule_action"] == "trigger":
            handle = trigger_schedule(options["name"])
            if options["json"]:
                print_json(out, {"workflow": options["name"], "run": str(handle.id)})
            else:
                out.write(printable(f"Started run {handle.id} of {options['name']!r} now."))
            return
        done = backfill_schedule(options["name"], options["start"], options["end"])
    except InvalidArgument as exc:
        raise CommandError(printable(str(exc))) from None
    if options["json"]:
        print_json(out, done.as_dict())
        return
    out.write(
        printable(
            f"Backfilled {len(done.ticks)} tick(s) of {done.workflow!r}: {done.created} new run(s), "
            f"{len(done.ticks) - done.created} had one already."
        )
    )
