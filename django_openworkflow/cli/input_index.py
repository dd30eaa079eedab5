"""``manage.py workflows input-index``: the PostgreSQL index that speeds up search by input.

Search by input (``input @> pattern``) works without it, scanning the runs the
other filters leave. The GIN index makes it fast on large tables, at a price on
every write that is not a HOT update (a new entry per key of the input), so it
is left to the projects that search by input (see docs/explanation/performance.md).
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..store import get_backend

ACTIONS = ("status", "create", "drop")


def add_input_index_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "input-index",
        parents=[common],
        help="create, drop or show the PostgreSQL index that speeds up search by input",
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=ACTIONS,
        default="status",
        help="create: build it without blocking writes (CREATE INDEX CONCURRENTLY); drop; status (the default)",
    )


def input_index_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows input-index [status|create|drop]``: print what the index is afterwards."""
    try:
        state = get_backend().input_index(options["action"])
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if state is None:
        raise CommandError("only PostgreSQL has an index for search by input; this database scans")
    if options.get("json"):
        import json

        out.write(json.dumps({"index": "owf_run_input_gin", "state": state}))
        return
    out.write(f"owf_run_input_gin: {state}")
