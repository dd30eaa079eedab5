"""``manage.py workflows queues``, ``queue pause|resume NAME`` and ``workers``: what serves each queue.

``queues`` lists every queue in use with its due and running runs, whether
it is paused and which live workers serve it, and flags the queues whose
due runs no live worker serves. ``queue pause`` keeps the workers from
claiming a queue's runs, from their next heartbeat, until ``queue resume``.
``workers`` lists the workers' heartbeat rows, live ones first.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..definitions.registry import registry
from ..errors import InvalidArgument
from ..formatting import format_duration, format_table, format_time, printable
from ..store import get_backend, workers
from .common import print_json


def add_queue_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    sub.add_parser(
        "queues", parents=[common], help="queues with their due and running runs, paused or not, and who serves them"
    )
    queue = sub.add_parser("queue", help="pause or resume a queue")
    actions = queue.add_subparsers(dest="queue_action", metavar="ACTION", required=True)
    for action, says in (("pause", "workers stop claiming its runs"), ("resume", "workers claim its runs again")):
        parser = actions.add_parser(action, parents=[common], help=f"{says} (from their next heartbeat)")
        parser.add_argument("name", metavar="NAME", help="the queue's name")
    listing = sub.add_parser("workers", parents=[common], help="the workers, live ones first, then recently gone ones")
    listing.add_argument("--live", action="store_true", help="live workers only")


def _declared() -> list[str]:
    return [spec.queue for spec in registry.all()]


def queues_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows queues``."""
    overview = workers.queue_overview(_declared())
    if options["json"]:
        print_json(out, [queue.as_dict() for queue in overview])
        return
    rows = [
        (
            queue.name,
            queue.due,
            queue.running,
            "paused" if queue.paused else "-",
            ", ".join(queue.served_by) or ("NOBODY: runs wait" if queue.unserved else "-"),
        )
        for queue in overview
    ]
    out.write(format_table(("queue", "due", "running", "paused", "served by"), rows))
    unserved = [queue.name for queue in overview if queue.unserved]
    if unserved:
        out.write(
            printable(
                f"No live worker serves {', '.join(unserved)}: start one with `runworkflows --queue NAME` "
                "(or `--queue '*'`)."
            )
        )


def queue_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows queue pause|resume NAME``."""
    name, pause = options["name"], options["queue_action"] == "pause"
    try:
        changed = workers.set_paused(name, pause, "manage.py workflows")
    except InvalidArgument as exc:
        raise CommandError(printable(str(exc))) from None
    if options["json"]:
        print_json(out, {"name": name, "paused": pause, "changed": changed})
    elif pause:
        out.write(
            printable(
                f"Queue {name!r} paused: workers claim none of its runs from their next heartbeat."
                if changed
                else f"Queue {name!r} was paused already."
            )
        )
    else:
        out.write(
            printable(
                f"Queue {name!r} resumed: workers claim its runs again from their next heartbeat."
                if changed
                else f"Queue {name!r} was not paused."
            )
        )


def workers_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows workers``."""
    found = workers.workers(include_gone=not options["live"])
    if options["json"]:
        print_json(out, [worker.as_dict() for worker in found])
        return
    if not found:
        out.write("No worker has written a heartbeat row yet: is `runworkflows` running?")
        return
    now = get_backend().now()
    rows = [
        (
            worker.worker_id,
            worker.state,
            worker.host,
            worker.pid,
            worker.version,
            ", ".join(worker.queues),
            workers.slots_label(worker.slots_busy, worker.slots_total, worker.state),
            format_time(worker.started_at),
            f"{format_duration(now - worker.last_seen_at)} ago",
        )
        for worker in found
    ]
    headers = ("worker", "state", "host", "pid", "version", "queues", "slots", "started", "last seen")
    out.write(format_table(headers, rows))
