"""``workflows cancel|retry|rerun --all-matching``: an operation on every run a filter matches.

The filter takes ``workflows list``'s options. The command prints how many
runs match and how many the operation would leave alone, by reason, then
asks for confirmation on the terminal; ``--yes`` confirms beforehand (a
script, or no terminal), ``--dry-run`` stops after the count. The runs are
then changed by chunks (``client/matching.py``), and the command says how
many changed and why the others were left alone. ``--json`` prints the
HTTP API's answer to ``POST runs/actions/...``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..client import matching
from ..formatting import printable
from ..store import queries
from .common import print_json
from .runs_view import filter_from_options

FILTER_OPTIONS = ("status", "workflow", "queue", "input", "subject", "attribute")

WORDS = {  # operation -> (what to ask, what was done)
    "cancel": ("Cancel", "Canceled"),
    "retry_now": ("Make due now", "Made due now"),
    "retry_from_failed_step": ("Retry from the failed step", "Sent back to pending"),
    "rerun": ("Re-run with the same input", "Started again"),
}


def add_filter_options(parser: argparse.ArgumentParser) -> None:
    """``--status``, ``--workflow``, ``--queue``, ``--input``, ``--subject``, ``--attribute``: for ``list`` and
    ``--all-matching``."""
    parser.add_argument(
        "--status",
        action="append",
        metavar="STATUS",
        help=f"only runs in this status ({', '.join(queries.DISPLAY_STATUSES)}); repeat or comma-separate for several",
    )
    parser.add_argument("--workflow", metavar="NAME", help="only runs of this workflow")
    parser.add_argument("--queue", metavar="NAME", help="only runs in this queue")
    parser.add_argument(
        "--input",
        metavar="JSON",
        help="only runs whose input contains this JSON object, e.g. '{\"customer\": 42}'",
    )
    parser.add_argument(
        "--subject",
        metavar="APP_LABEL.MODEL:PK",
        help="only runs linked to this object (started with subject=obj), e.g. shop.order:42",
    )
    parser.add_argument(
        "--attribute",
        action="append",
        metavar="NAME[__LOOKUP]=VALUE",
        help="only runs whose typed attribute matches, compared as its declared type: region=eu, amount__gte=10.5, "
        "due__lt=2026-12-01T00:00:00Z, customer_id__in=1,2 (lookups eq, gt, gte, lt, lte, in); repeat for several",
    )


def add_matching_options(parser: argparse.ArgumentParser) -> None:
    """What makes an operation apply to every run a filter matches instead of one RUN_ID."""
    group = parser.add_argument_group("every run matching a filter (instead of RUN_ID)")
    group.add_argument(
        "--all-matching",
        action="store_true",
        help="act on every run the filter options match "
        "(--status, --workflow, --queue, --input, --subject, --attribute; none: every run)",
    )
    add_filter_options(group)  # type: ignore[arg-type]  # an argument group takes the same add_argument
    group.add_argument("--dry-run", action="store_true", help="with --all-matching: count, change nothing")
    group.add_argument("--yes", action="store_true", help="with --all-matching: do not ask for confirmation")


def wants_matching(options: dict[str, Any]) -> bool:
    """Whether the command acts on a filter (``--all-matching``) rather than on RUN_ID; CommandError if unclear."""
    filtering = [f"--{name}" for name in FILTER_OPTIONS if options.get(name) is not None]
    filtering += [f"--{name.replace('_', '-')}" for name in ("dry_run", "yes") if options.get(name)]
    if options.get("all_matching"):
        if options.get("run_id") is not None:
            raise CommandError("give a RUN_ID or --all-matching with a filter, not both")
        return True
    if filtering:
        raise CommandError(f"{filtering[0]} needs --all-matching (or give a RUN_ID alone)")
    if options.get("run_id") is None:
        raise CommandError("give a RUN_ID, or --all-matching with a filter (the options of `workflows list`)")
    return False


def matching_command(operation: str, options: dict[str, Any], out: OutputWrapper) -> None:
    """Count, ask, then apply ``operation`` to every run the options' filter matches."""
    runs = filter_from_options(options).apply(queries.runs())
    seen = matching.preview(operation, runs)
    ask, done = WORDS[operation]
    if options["dry_run"] or seen.count == 0:
        if options["json"]:
            print_json(out, _answer(options, False, seen.count, seen.would_change, seen.refused, []))
        elif seen.count == 0:
            out.write("No run matches the filter; nothing to do.")
        else:
            out.write(_summary(f"{ask}: {_runs(seen.count)} match the filter;", seen.would_change, seen.refused))
            out.write("Nothing done (--dry-run).")
        return
    if not options["yes"]:
        _confirm(f"{ask}: {_runs(seen.count)} match the filter;", seen, out)
    try:
        result = matching.apply_to_matching(operation, runs, confirm_count=seen.count)
    except matching.MatchCountChanged as exc:
        raise CommandError(f"{exc} (nothing done)") from None
    if options["json"]:
        print_json(
            out,
            _answer(
                options, True, result.matched, result.changed, dict(result.refused), [str(i) for i in result.created]
            ),
        )
        return
    out.write(_summary(f"{done}: {_runs(result.changed)} of {result.matched};", None, dict(result.refused)))


def _confirm(heading: str, seen: matching.Preview, out: OutputWrapper) -> None:
    if not sys.stdin.isatty():
        raise CommandError(
            f"{heading} {seen.would_change} would change. There is no terminal to confirm on: "
            "check with --dry-run, then pass --yes to confirm"
        )
    out.write(_summary(heading, seen.would_change, seen.refused))
    out.write("Go ahead? [y/N] ", ending="")
    out.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise CommandError("not confirmed; nothing done")


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"


def _summary(heading: str, would_change: int | None, refused: dict[str, int]) -> str:
    lines = [heading if would_change is None else f"{heading} {would_change} would change."]
    if refused:
        lines.append("Left alone:" if would_change is None else "Would be left alone:")
        width = len(str(max(refused.values())))
        ranked = sorted(refused.items(), key=lambda item: -item[1])
        lines += [printable(f"  {count:>{width}}  {reason}") for reason, count in ranked]
    return "\n".join(lines)


def _answer(
    options: dict[str, Any], done: bool, count: int, changed: int, refused: dict[str, int], created: list[str]
) -> dict[str, Any]:
    """The HTTP API's answer to ``POST runs/actions/...``."""
    name = {"cancel": "cancel", "rerun": "rerun"}.get(options["subcommand"], "")
    if options["subcommand"] == "retry":
        name = "retry" if options.get("from_failed_step") else "retry-now"
    return {
        "action": name,
        "done": done,
        "count": count,
        "changed": changed,
        "refused": sum(refused.values()),
        "reasons": [{"reason": r, "count": n} for r, n in sorted(refused.items(), key=lambda item: -item[1])],
        "created": created,
    }
