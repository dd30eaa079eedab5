"""``workflows cancel|retry|rerun --all-matching`` (cli/matching.py): count, confirm, act by chunks."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_openworkflow.client import operations
from django_openworkflow.models import WorkflowRun
from tests.admin.helpers import make_run

pytestmark = pytest.mark.django_db


class Terminal(io.StringIO):
    """What an operator types, on a terminal."""

    def isatty(self) -> bool:
        return True


def workflows(*args: str) -> str:
    out = io.StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def _failed(count: int, **fields: Any) -> list[WorkflowRun]:
    return [make_run(status="failed", error={"type": "E", "message": "x"}, **fields) for _ in range(count)]


def test_dry_run_counts_and_says_what_would_be_left_alone() -> None:
    _failed(3)
    make_run(status="completed")
    make_run(workflow_name="sleeper", status="failed")
    out = workflows("retry", "--from-failed-step", "--all-matching", "--workflow", "three-steps", "--dry-run")
    assert out == (
        "Retry from the failed step: 4 runs match the filter; 3 would change.\n"
        "Would be left alone:\n"
        "  1  it has not failed (it is completed)\n"
        "Nothing done (--dry-run).\n"
    )
    assert WorkflowRun.objects.filter(status="failed").count() == 4


def test_without_a_terminal_it_refuses_unless_yes(monkeypatch: Any) -> None:
    runs = _failed(2)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # piped: not a confirmation
    with pytest.raises(CommandError, match="no terminal to confirm on: check with --dry-run, then pass --yes"):
        workflows("cancel", "--all-matching", "--status", "failed")
    with pytest.raises(CommandError, match="no terminal"):
        workflows("rerun", "--all-matching")
    assert WorkflowRun.objects.count() == 2
    out = workflows("rerun", "--all-matching", "--status", "failed", "--yes")
    assert out == "Started again: 2 runs of 2;\n"
    assert WorkflowRun.objects.exclude(id__in=[run.id for run in runs]).filter(status="pending").count() == 2


def test_on_a_terminal_it_asks_and_acts_by_chunks(monkeypatch: Any) -> None:
    monkeypatch.setattr(operations, "CHUNK", 3)
    _failed(8)
    make_run(status="completed")
    monkeypatch.setattr("sys.stdin", Terminal("y\n"))
    out = workflows("retry", "--all-matching", "--from-failed-step", "--status", "failed,completed")
    assert out == (
        "Retry from the failed step: 9 runs match the filter; 8 would change.\n"
        "Would be left alone:\n"
        "  1  it has not failed (it is completed)\n"
        "Go ahead? [y/N] Sent back to pending: 8 runs of 9;\n"
        "Left alone:\n"
        "  1  it has not failed (it is completed)\n"
    )
    assert WorkflowRun.objects.filter(status="pending").count() == 8


def test_answering_no_does_nothing(monkeypatch: Any) -> None:
    make_run()
    monkeypatch.setattr("sys.stdin", Terminal("\n"))
    with pytest.raises(CommandError, match="not confirmed; nothing done"):
        workflows("cancel", "--all-matching")
    assert WorkflowRun.objects.get().status == "pending"


def test_json_is_the_apis_answer() -> None:
    make_run(workflow_name="versioned", version="v1", status="completed")
    make_run(workflow_name="gone", status="completed")
    preview = json.loads(workflows("retry", "--all-matching", "--dry-run", "--json"))
    assert preview == {
        "action": "retry-now",
        "done": False,
        "count": 2,
        "changed": 0,
        "refused": 2,
        "reasons": [{"reason": "it has finished (completed)", "count": 2}],
        "created": [],
    }
    done = json.loads(workflows("rerun", "--all-matching", "--yes", "--json"))
    assert (done["action"], done["done"], done["changed"], done["refused"], len(done["created"])) == (
        "rerun",
        True,
        1,
        1,
        1,
    )
    assert done["reasons"] == [{"reason": "this process has no workflow 'gone' version None to start", "count": 1}]


def test_nothing_matching_is_said_plainly() -> None:
    assert (
        workflows("cancel", "--all-matching", "--workflow", "nothing") == "No run matches the filter; nothing to do.\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cancel",), "give a RUN_ID, or --all-matching with a filter"),
        (("cancel", "--status", "failed"), "--status needs --all-matching"),
        (("retry", "--yes"), "--yes needs --all-matching"),
        (("cancel", "--all-matching", "0123abcd"), "give a RUN_ID or --all-matching with a filter, not both"),
        (("cancel", "--all-matching", "--status", "exploded"), "unknown status 'exploded'"),
        (("cancel", "--all-matching", "--queue", "no spaces"), "is not a queue name"),
        (("cancel", "--all-matching", "--input", "[1]"), "--input: "),
    ],
)
def test_bad_arguments_are_one_clear_line(args: tuple[str, ...], message: str) -> None:
    make_run()
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        workflows(*args)
    assert WorkflowRun.objects.get().status == "pending"
