"""``manage.py workflows check-replay``: would the code here replay the runs in flight? Exit 1 where not."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..formatting import format_table
from ..worker.replay_check import check_replay
from .common import print_json


def add_check_replay_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "check-replay",
        parents=[common],
        help="replay the journals of runs in flight against this code, running no step; exit 1 on a mismatch",
    )
    parser.add_argument("--workflow", action="append", default=[], help="only this workflow (repeatable)")
    parser.add_argument(
        "--sample", type=int, default=None, metavar="N", help="only the N newest runs of each workflow and version"
    )


def check_replay_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """Replay, report each run that would not replay (all of them with -v 2), and fail if any would not."""
    sample = options["sample"]
    if sample is not None and sample < 1:
        raise CommandError(f"--sample must be at least 1, got {sample}")
    findings = check_replay(workflows=options["workflow"], sample=sample)
    bad = [finding for finding in findings if not finding.ok]
    if options["json"]:
        print_json(out, {"checked": len(findings), "failed": len(bad), "runs": [_json(f) for f in findings]})
    else:
        shown = findings if int(options.get("verbosity", 1)) >= 2 else bad
        if shown:
            rows = [
                [str(f.run_id), f.workflow_name, f.version or "", "ok" if f.ok else "MISMATCH", f.message]
                for f in shown
            ]
            out.write(format_table(["RUN", "WORKFLOW", "VERSION", "REPLAY", "DETAIL"], rows))
        out.write(f"{len(findings)} run(s) in flight checked, {len(bad)} would not replay.")
    if bad:
        raise CommandError(f"{len(bad)} run(s) in flight would not replay on this code", returncode=1)


def _json(finding: Any) -> dict[str, Any]:
    value = dataclasses.asdict(finding)
    value["run_id"] = str(finding.run_id)
    return value
