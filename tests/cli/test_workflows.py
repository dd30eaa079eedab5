"""``manage.py workflows``: every subcommand through call_command, text and JSON, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError
from django.db import connection
from django.utils import timezone

from django_openworkflow.models import Signal, StepAttempt, WorkflowRun
from tests.cli.helpers import as_json, workflows
from tests.conftest import CEILING
from tests.fixtures.testapp.workflows import always_fails

ROOT = Path(__file__).resolve().parents[2]


def make_run(**fields: Any) -> WorkflowRun:
    values: dict[str, Any] = {
        "workflow_name": "three-steps",
        "status": "pending",
        "input": {"start": 2},
        "available_at": timezone.now(),
    }
    values.update(fields)
    return WorkflowRun.objects.create(**values)


def some_runs() -> dict[str, WorkflowRun]:
    now = timezone.now()
    return {
        "pending": make_run(),
        "parked": make_run(workflow_name="sleeper", status="running", available_at=now + timedelta(minutes=5)),
        "running": make_run(status="running", worker_id="w-1", started_at=now),
        "completed": make_run(
            status="completed", output={"result": 21}, started_at=now, finished_at=now + timedelta(seconds=1)
        ),
        "failed": make_run(
            workflow_name="always-fails",
            status="failed",
            error={
                "type": "ValueError",
                "message": "kaboom",
                "traceback": "Traceback (most recent call last):\nValueError: kaboom",
            },
        ),
    }


# -- list --------------------------------------------------------------------------


@pytest.mark.django_db
def test_list_without_runs() -> None:
    assert workflows("list").strip() == "No runs."
    assert as_json("list") == []


@pytest.mark.django_db
def test_list_shows_newest_first_with_display_status() -> None:
    runs = some_runs()
    text = workflows("list")
    lines = text.splitlines()
    assert lines[0].split() == ["ID", "WORKFLOW", "VERSION", "STATUS", "ATTEMPTS", "CREATED", "DURATION"]
    assert str(runs["failed"].id) in lines[1]  # created last
    assert " parked " in text and " running " in text
    data = as_json("list")
    assert [row["id"] for row in data] == [str(r.id) for r in reversed(list(runs.values()))]
    assert {row["status"] for row in data} == set(runs)
    assert "input" not in data[0]  # the list leaves payloads out


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--status", "parked"], {"parked"}),
        (["--status", "running"], {"running"}),
        (["--status", "failed,completed"], {"failed", "completed"}),
        (["--status", "failed", "--status", "pending"], {"failed", "pending"}),
        (["--workflow", "three-steps"], {"pending", "running", "completed"}),
        (["--workflow", "three-steps", "--status", "pending"], {"pending"}),
    ],
)
def test_list_filters(args: list[str], expected: set[str]) -> None:
    some_runs()
    assert {row["status"] for row in as_json("list", *args)} == expected


@pytest.mark.django_db
def test_list_limit() -> None:
    some_runs()
    assert len(as_json("list", "--limit", "2")) == 2
    with pytest.raises(CommandError, match="positive"):
        workflows("list", "--limit", "0")


@pytest.mark.django_db
def test_list_unknown_status_is_an_error() -> None:
    expected = "unknown status 'sleeping'; choose from pending, running, retrying, waiting, parked"
    with pytest.raises(CommandError, match=expected):
        workflows("list", "--status", "sleeping")


# -- show ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_show_prints_the_run_and_its_journal() -> None:
    run = some_runs()["failed"]
    start = timezone.now()
    for step, status in (("boom", "failed"), ("boom", "failed"), ("cleanup", "completed")):
        StepAttempt.objects.create(
            workflow_run=run,
            step_name=step,
            kind="run",
            status=status,
            started_at=start,
            finished_at=start,
            output="done" if status == "completed" else None,
            error={"type": "ValueError", "message": "kaboom"} if status == "failed" else None,
        )
    text = workflows("show", str(run.id))
    assert f"Run {run.id}" in text and "always-fails" in text
    assert "error            ValueError: kaboom" in text
    assert "Journal: 3 step attempts" in text
    table = text[text.index("Journal") :].splitlines()
    assert table[1].split()[:5] == ["#", "STEP", "KIND", "STATUS", "ATTEMPT"]
    assert table[2].split()[:5] == ["1", "boom", "run", "failed", "1"]
    assert table[3].split()[:5] == ["2", "boom", "run", "failed", "2"]
    assert table[4].split()[:5] == ["3", "cleanup", "run", "completed", "1"]
    assert text.rstrip().endswith("ValueError: kaboom")  # the traceback closes the report


@pytest.mark.django_db
def test_show_json() -> None:
    run = some_runs()["completed"]
    StepAttempt.objects.create(workflow_run=run, step_name="one", kind="run", status="completed", output={"n": 2})
    data = as_json("show", str(run.id))
    assert data["id"] == str(run.id) and data["output"] == {"result": 21}
    assert data["input"] == {"start": 2}
    assert [(a["step"], a["attempt"], a["output"]) for a in data["steps"]] == [("one", 1, {"n": 2})]


@pytest.mark.django_db
def test_show_accepts_the_short_id() -> None:
    run = some_runs()["parked"]
    text = workflows("show", str(run.id)[:8])
    assert f"Run {run.id}" in text and "parked (wakes in" in text


@pytest.mark.django_db
def test_show_errors() -> None:
    with pytest.raises(CommandError, match="no workflow run with id"):
        workflows("show", str(uuid.uuid4()))
    with pytest.raises(CommandError, match="is not a workflow run id"):
        workflows("show", "nope")
    with pytest.raises(CommandError, match="no workflow run with an id starting with"):
        workflows("show", "00000000")
    make_run(id=uuid.UUID("abcdef01-0000-4000-8000-000000000001"))
    make_run(id=uuid.UUID("abcdef01-0000-4000-8000-000000000002"))
    with pytest.raises(CommandError, match="more than one workflow run"):
        workflows("show", "abcdef01")
    with pytest.raises(CommandError):  # the subcommand needs its argument
        workflows("show")


# -- start -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_start_inserts_a_pending_run() -> None:
    text = workflows("start", "versioned", "--version", "v1", "--input", '{"user_id": 7}')
    run = WorkflowRun.objects.get()
    assert text.strip() == f"Started run {run.id} of versioned v1."
    assert (run.workflow_name, run.version, run.input, run.status) == ("versioned", "v1", {"user_id": 7}, "pending")


@pytest.mark.django_db
def test_start_defaults_to_the_latest_version_and_null_input() -> None:
    data = as_json("start", "versioned")
    assert data["version"] == "v2" and data["status"] == "pending" and data["created"] is True
    assert WorkflowRun.objects.get(id=data["id"]).input is None


@pytest.mark.django_db
def test_start_with_an_idempotency_key_starts_once() -> None:
    first = as_json("start", "three-steps", "--idempotency-key", "order-1")
    again = workflows("start", "three-steps", "--idempotency-key", "order-1")
    assert f"Run {first['id']} of three-steps already exists for idempotency key 'order-1'." in again
    assert WorkflowRun.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["three-steps", "--input", "{nope"], "--input is not valid JSON: Expecting property name"),
        (["no-such-workflow"], "no workflow named 'no-such-workflow' is registered"),
        (["versioned", "--version", "v9"], "no workflow 'versioned' with version 'v9' is registered"),
        (["three-steps", "--input", "NaN"], "NaN"),
        (["three-steps", "--idempotency-key", ""], "idempotency_key must be a non-empty string"),
    ],
)
def test_start_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        workflows("start", *args)
    assert WorkflowRun.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_start_and_wait_for_the_output(workers: Any) -> None:
    workers.start()
    text = workflows("start", "three-steps", "--input", '{"start": 3}', "--wait", "--timeout", "60")
    assert "completed. Output:" in text and '"result": 31' in text
    data = as_json("start", "three-steps", "--input", '{"start": 5}', "--wait", "--timeout", "60")
    assert data["status"] == "completed" and data["output"] == {"result": 51}
    with pytest.raises(CommandError, match=r"failed: .*StepFailed: step 'boom' failed: ValueError: kaboom"):
        workflows("start", "always-fails", "--wait", "--timeout", "60")


@pytest.mark.django_db
def test_start_wait_gives_up_after_the_timeout() -> None:
    with pytest.raises(CommandError, match=r"did not finish within 0.05 s \(it goes on; is a worker running\?\)"):
        workflows("start", "three-steps", "--wait", "--timeout", "0.05")
    assert WorkflowRun.objects.get().status == "pending"


# -- cancel and retry ---------------------------------------------------------------------


@pytest.mark.django_db
def test_cancel() -> None:
    runs = some_runs()
    assert workflows("cancel", str(runs["pending"].id)).strip() == f"Canceled run {runs['pending'].id}."
    data = as_json("cancel", str(runs["parked"].id))
    assert data["id"] == str(runs["parked"].id) and data["status"] == "canceled"
    assert WorkflowRun.objects.filter(status="canceled").count() == 2
    with pytest.raises(CommandError, match=r"cannot cancel run .*: it has already finished \(completed\)"):
        workflows("cancel", str(runs["completed"].id))
    with pytest.raises(CommandError, match="no workflow run with id"):
        workflows("cancel", str(uuid.uuid4()))


@pytest.mark.django_db
def test_retry_wakes_a_parked_run() -> None:
    run = some_runs()["parked"]
    assert workflows("retry", str(run.id)).strip() == f"Run {run.id} is due now."
    run.refresh_from_db()
    assert run.available_at <= timezone.now()
    with pytest.raises(CommandError, match="cannot retry now run .*: it is due already"):
        workflows("retry", str(run.id))  # already due


@pytest.mark.django_db
def test_retry_of_a_failed_run_points_to_the_flag() -> None:
    run = some_runs()["failed"]
    with pytest.raises(CommandError) as raised:
        workflows("retry", str(run.id))
    assert str(raised.value) == (
        f"run {run.id} has failed, and retry alone only wakes a parked run: resume it at its failed step with"
        f" `workflows retry --from-failed-step {run.id}`, or start it again from the start with"
        f" `workflows rerun {run.id}`"
    )
    run.refresh_from_db()
    assert run.status == "failed"


@pytest.mark.django_db
def test_retry_from_failed_step() -> None:
    runs = some_runs()
    data = as_json("retry", str(runs["failed"].id), "--from-failed-step")
    assert data["id"] == str(runs["failed"].id) and data["status"] == "pending"
    runs["failed"].refresh_from_db()
    assert runs["failed"].status == "pending" and runs["failed"].error is None
    with pytest.raises(
        CommandError, match=r"cannot retry from failed step run .*: it has not failed \(it is completed\)"
    ):
        workflows("retry", str(runs["completed"].id), "--from-failed-step")


@pytest.mark.django_db(transaction=True)
def test_retry_from_failed_step_runs_the_step_again(run_worker: Any) -> None:
    handle = always_fails.run()
    run_worker()
    assert handle.status() == "failed"
    workflows("retry", str(handle.id), "--from-failed-step")
    run_worker()
    attempts = as_json("show", str(handle.id))["steps"]
    assert [(a["step"], a["attempt"], a["status"]) for a in attempts] == [("boom", 1, "failed"), ("boom", 2, "failed")]


# -- stats -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_stats() -> None:
    some_runs()
    make_run(status="completed")
    lines = workflows("stats").splitlines()
    assert lines[0].split() == [
        "WORKFLOW",
        "PENDING",
        "RUNNING",
        "RETRYING",
        "WAITING",
        "PARKED",
        "COMPLETED",
        "FAILED",
        "CANCELED",
        "CONTINUED",
        "TOTAL",
    ]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[1:]}
    assert rows == {
        "always-fails": [0, 0, 0, 0, 0, 0, 1, 0, 0, 1],
        "sleeper": [0, 0, 0, 0, 1, 0, 0, 0, 0, 1],
        "three-steps": [1, 1, 0, 0, 0, 2, 0, 0, 0, 4],
        "(all)": [1, 1, 0, 0, 1, 2, 1, 0, 0, 6],
    }
    data = as_json("stats")
    assert data[2] == {
        "workflow": "three-steps",
        "pending": 1,
        "running": 1,
        "retrying": 0,
        "waiting": 0,
        "parked": 0,
        "completed": 2,
        "failed": 0,
        "canceled": 0,
        "continued": 0,
        "total": 4,
    }


@pytest.mark.django_db
def test_stats_without_runs() -> None:
    assert workflows("stats").strip() == "No runs."
    assert as_json("stats") == []


# -- a real process: errors are one line and a non-zero exit -------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["start", "three-steps", "--input", "{"], "CommandError: --input is not valid JSON: Expecting property name"),
        (["show", str(uuid.UUID(int=1))], "CommandError: no workflow run with id 00000000-0000-0000-0000-000000000001"),
        (["start", "nope"], "CommandError: no workflow named 'nope' is registered"),
        (
            ["signal", str(uuid.UUID(int=3)), "go"],
            "CommandError: no workflow run with id 00000000-0000-0000-0000-000000000003",
        ),
        (["signal", str(uuid.UUID(int=3)), "go", "--data", "[1,"], "CommandError: --data is not valid JSON"),
        (
            ["start", "three-steps", "--input", "[" * 5000 + "]" * 5000],
            "CommandError: --input nests deeper than 30 levels, the limit",
        ),
    ],
)
def test_errors_exit_non_zero_with_one_line(args: list[str], line: str) -> None:
    env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]))
    proc = subprocess.run(
        [sys.executable, "-m", "django", "workflows", "--settings=tests.settings", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().startswith(line) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# -- signal ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_signal_to_a_run_not_waiting_is_buffered() -> None:
    run = make_run(workflow_name="approval")
    out = workflows("signal", str(run.id), "approval", "--data", '{"by": "ada"}')
    assert out.strip() == f"Signal 'approval' buffered for run {run.id}: the first wait for it will take it."
    signal = Signal.objects.get()
    assert (signal.name, signal.data, signal.consumed_by_id) == ("approval", {"by": "ada"}, None)


@pytest.mark.django_db
def test_signal_to_a_waiting_run_is_delivered_json_and_short_id() -> None:
    now = timezone.now()
    run = make_run(workflow_name="approval", status="running", started_at=now)
    wait = StepAttempt.objects.create(
        workflow_run=run,
        step_name="approval",
        kind="signal",
        status="running",
        started_at=now,
        context={"signal": "approval", "timeout_at": (now + timedelta(hours=1)).isoformat()},
    )
    result = as_json("signal", str(run.id)[:8], "approval", "--data", "[1, 2]", "--idempotency-key", "k")
    assert result == {"id": str(run.id), "signal": "approval", "delivered": True, "buffered": False, "data": [1, 2]}
    wait.refresh_from_db()
    assert wait.status == "completed" and wait.output["data"] == [1, 2]
    # The same key again delivers nothing more.
    assert as_json("signal", str(run.id), "approval", "--idempotency-key", "k")["delivered"] is False
    assert Signal.objects.count() == 1


@pytest.mark.django_db
def test_signal_without_data_sends_null() -> None:
    run = make_run()
    assert "buffered" in workflows("signal", str(run.id), "go")
    assert Signal.objects.get().data is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["signal", str(uuid.UUID(int=2)), "approval"], "no workflow run with id 00000000-0000-0000-0000-000000000002"),
        (["signal", "nope", "approval"], "'nope' is not a workflow run id"),
        (["signal", "RUN", "approval", "--data", "{"], "--data is not valid JSON: Expecting property name"),
        (["signal", "DONE", "approval"], "is completed; signals can only be sent to unfinished runs"),
        (["signal", "RUN", "approval", "--idempotency-key", ""], "idempotency_key must be a non-empty string"),
    ],
)
def test_signal_errors(args: list[str], message: str) -> None:
    run = make_run()
    done = make_run(status="completed", finished_at=timezone.now())
    args = [{"RUN": str(run.id), "DONE": str(done.id)}.get(a, a) for a in args]
    with pytest.raises(CommandError) as excinfo:
        workflows(*args)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert not Signal.objects.exists()


# -- hostile data is shown, never obeyed -----------------------------------------------------

# ESC (an escape sequence that would clear the screen), BEL, CR (overwrite the line), a C1 CSI, a bidi override.
CONTROLS = "\x1b[2J\x07\r\x9b31m\u202e"
ESCAPED = "\\x1b[2J\\x07\\r\\x9b31m\\u202e"


def _hostile_run(**fields: Any) -> WorkflowRun:
    run = make_run(
        workflow_name=f"wf{CONTROLS}",
        status="failed",
        idempotency_key=f"key{CONTROLS}",
        input={f"in{CONTROLS}": f"value{CONTROLS}"},
        error={"type": f"Boom{CONTROLS}", "message": f"msg{CONTROLS}", "traceback": f"line 1\nline 2{CONTROLS}"},
        **fields,
    )
    StepAttempt.objects.create(
        workflow_run=run,
        step_name=f"step{CONTROLS}",
        kind="run",
        status="failed",
        started_at=timezone.now(),
        error={"type": "E", "message": f"step failed{CONTROLS}"},
    )
    StepAttempt.objects.create(
        workflow_run=run,
        step_name="done",
        kind="run",
        status="completed",
        started_at=timezone.now(),
        output=f"out{CONTROLS}",
    )
    return run


def _no_controls(text: str) -> None:
    raw = [c for c in text if (ord(c) < 0x20 and c not in "\n") or 0x7F <= ord(c) <= 0x9F or c == "\u202e"]
    assert not raw, f"raw control characters reach the terminal: {raw!r}"


@pytest.mark.django_db
def test_show_and_list_escape_control_characters_from_data() -> None:
    run = _hostile_run()
    text = workflows("show", str(run.id))
    _no_controls(text)
    for shown in (f"wf{ESCAPED}", f"key{ESCAPED}", f"Boom{ESCAPED}: msg{ESCAPED}", f"step{ESCAPED}", "step failed"):
        assert shown in text, shown
    assert f"line 1\nline 2{ESCAPED}" in text  # the traceback keeps its lines
    _no_controls(workflows("list"))
    assert f"wf{ESCAPED}" in workflows("list")
    _no_controls(workflows("stats"))


@pytest.mark.django_db
def test_json_output_escapes_control_characters_and_reads_back() -> None:
    run = _hostile_run()
    for args in (("show", str(run.id)), ("list",), ("stats",)):
        text = workflows(*args, "--json")
        _no_controls(text.replace("\n", ""))
    data = as_json("show", str(run.id))
    assert data["idempotency_key"] == f"key{CONTROLS}" and data["input"] == run.input
    assert data["steps"][1]["output"] == f"out{CONTROLS}"


@pytest.mark.django_db
def test_signal_and_start_messages_escape_names_and_keys() -> None:
    run = make_run()
    for text in (
        workflows("signal", str(run.id), f"go{CONTROLS}", "--idempotency-key", f"k{CONTROLS}"),
        workflows("start", "three-steps", "--idempotency-key", f"k{CONTROLS}"),
        workflows("start", "three-steps", "--idempotency-key", f"k{CONTROLS}"),  # already exists
    ):
        _no_controls(text.rstrip("\n"))


@pytest.mark.skipif(connection.vendor != "sqlite", reason="only SQLite stores a lone surrogate (in JSON)")
@pytest.mark.django_db
def test_rows_holding_lone_surrogates_and_nul_are_shown_escaped() -> None:
    run = make_run(
        status="failed",
        idempotency_key="key\x00",
        input={"\ud800": "\udfff", "nul": "a\x00b"},
        output=["\ud83d"],
        error={"type": "E\ud800", "message": "m\x00\ud800", "traceback": "t\ud800"},
    )
    StepAttempt.objects.create(
        workflow_run=run, step_name="s\x00", kind="run", status="completed", output={"x": "\udcff"}
    )
    text = workflows("show", str(run.id))
    text.encode()  # a UTF-8 terminal can take it
    assert '{"\\ud800":"\\udfff","nul":"a\\u0000b"}' in text and "key\\x00" in text
    assert "E\\ud800: m\\x00\\ud800" in text and "s\\x00" in text and '{"x":"\\udcff"}' in text
    raw = workflows("show", str(run.id), "--json")
    raw.encode()
    data = json.loads(raw)  # the escapes read back as the stored values
    assert data["input"] == {"\ud800": "\udfff", "nul": "a\x00b"}
    assert data["error"]["message"] == "m\x00\ud800" and data["steps"][0]["output"] == {"x": "\udcff"}
    workflows("list").encode()
    workflows("list", "--json").encode()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--workflow", "a\x00b"], '--workflow "a\\u0000b" contains a NUL character'),
        (["start", "three-steps", "--wait", "--timeout", "nan"], "must be a finite, non-negative number of seconds"),
        (["start", "three-steps", "--wait", "--timeout", "-1"], "must be a finite, non-negative number of seconds"),
        (["start", "three-steps", "--input", "[" * 5000 + "]" * 5000], "--input nests deeper than 30 levels"),
        (["start", f"x{CONTROLS}"], "no workflow named 'x\\x1b[2J\\x07\\r\\x9b31m\\u202e' is registered"),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], message: str) -> None:
    with pytest.raises(CommandError) as excinfo:
        workflows(*args)
    assert message in str(excinfo.value) and "\n" not in str(excinfo.value)
    assert WorkflowRun.objects.count() == 0


# -- actions that would do nothing refuse, saying why -------------------------------------------


def parked_in_a_wait(kind: str, name: str) -> WorkflowRun:
    now = timezone.now()
    run = make_run(workflow_name="approval", status="running", started_at=now, available_at=now + timedelta(hours=1))
    StepAttempt.objects.create(
        workflow_run=run, step_name="wait", kind=kind, status="running", started_at=now, context={kind: name}
    )
    return run


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "name"), [("signal", "approval"), ("event", "order.paid")])
def test_retry_now_refuses_a_run_waiting_for_a_signal_or_event(kind: str, name: str) -> None:
    run = parked_in_a_wait(kind, name)
    with pytest.raises(CommandError) as excinfo:
        workflows("retry", str(run.id))
    assert str(excinfo.value) == (
        f"cannot retry now run {run.id}: it waits for {kind} '{name}', "
        f"which retry now cannot deliver (send the {kind} instead)"
    )
    assert WorkflowRun.objects.get(id=run.id).available_at == run.available_at


@pytest.mark.django_db
def test_retry_from_failed_step_refuses_a_run_failed_by_the_step_limit() -> None:
    run = make_run(status="failed", error={"type": "StepLimitExceeded", "message": "reached 1000 step attempts"})
    with pytest.raises(CommandError, match=r"cannot retry from failed step run .*: .*MAX_STEP_ATTEMPTS.*re-run it"):
        workflows("retry", str(run.id), "--from-failed-step")
    assert WorkflowRun.objects.get(id=run.id).status == "failed"


# -- what a held run is executing ------------------------------------------------------------------


@pytest.mark.django_db
def test_show_says_which_step_a_held_run_is_executing_and_for_how_long() -> None:
    now = timezone.now()
    run = make_run(status="running", worker_id="w-1", started_at=now - timedelta(minutes=3))
    StepAttempt.objects.create(workflow_run=run, step_name="one", kind="run", status="completed", started_at=now)
    StepAttempt.objects.create(
        workflow_run=run, step_name="charge-card", kind="run", status="running", started_at=now - timedelta(minutes=2)
    )
    assert "status           running (executing step 'charge-card' for 2 m)" in workflows("show", str(run.id))
    # Held with no open attempt: the status alone, as before.
    StepAttempt.objects.filter(status="running").delete()
    assert "status           running\n" in workflows("show", str(run.id))


# -- flow control: queues, priorities, limits, blocked runs ----------------------------------------


def blocked_run(**fields: Any) -> WorkflowRun:
    from tests.fixtures.flow_display_workflows import blocked_run_fields

    return make_run(**blocked_run_fields(**fields))


@pytest.mark.django_db
def test_list_filters_by_queue_and_shows_queue_and_priority() -> None:
    plain = make_run()
    urgent = make_run(workflow_name="send-mail", queue="emails", priority=5)
    blocked = blocked_run()
    text = workflows("list")
    assert text.splitlines()[0].split() == [
        "ID", "WORKFLOW", "VERSION", "STATUS", "QUEUE", "PRIORITY", "ATTEMPTS", "CREATED", "DURATION",
    ]  # fmt: skip
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]}
    assert rows[str(urgent.id)][3:6] == ["pending", "emails", "5"]
    assert rows[str(blocked.id)][3:6] == ["pending", "(blocked)", "payments"]
    assert rows[str(plain.id)][3:5] == ["pending", "default"]
    assert [row["id"] for row in as_json("list", "--queue", "emails")] == [str(urgent.id)]
    assert [row["id"] for row in as_json("list", "--queue", "default")] == [str(plain.id)]
    assert as_json("list", "--queue", "nothing-here") == []
    assert workflows("list", "--queue", "nothing-here").strip() == "No runs."
    only = workflows("list", "--queue", "payments")
    assert str(blocked.id) in only and str(plain.id) not in only and "9999-01-01" not in only
    data = as_json("list", "--queue", "payments")[0]
    assert data["queue"] == "payments" and data["concurrency_key"] == "charge/42" and data["concurrency_limit"] == 2
    assert data["available_at"] is None and data["blocked_at"]  # never the year 9999


@pytest.mark.django_db
@pytest.mark.parametrize("queue", ["has space", "", "x" * 65, "sl/ash", "nul\x00", "newline\n"])
def test_list_refuses_a_bad_queue_name(queue: str) -> None:
    with pytest.raises(CommandError, match="is not a queue name: 1 to 64 letters, digits"):
        workflows("list", "--queue", queue)


@pytest.mark.django_db
def test_show_of_a_blocked_run_says_what_it_waits_for() -> None:
    run = blocked_run()
    text = workflows("show", str(run.id))
    assert "status           pending (waiting for a concurrency place)" in text
    assert "waiting          Waiting for a place under concurrency key charge/42 (limit 2) since " in text
    assert "9999-01-01" not in text and "available at" not in text
    assert "queue            payments" in text
    assert "concurrency      charge/42: at most 2 at once (parked runs give their place up)" in text
    data = as_json("show", str(run.id))
    assert data["available_at"] is None and data["blocked_at"] is not None


@pytest.mark.django_db
def test_show_prints_the_queue_priority_and_limits() -> None:
    from tests.fixtures.flow_display_workflows import charge

    handle = charge.run({"customer": 42})
    text = workflows("show", str(handle.id))
    assert "queue            payments" in text
    assert "priority         5" in text
    assert "concurrency      flow-display-charge/42: at most 2 at once (parked runs keep their place)" in text
    assert "rate limit       flow-display-charge: 100 per minute" in text
    assert "debounce key" not in text
    debounced = make_run(debounce_key="digest/7")
    assert "debounce key     digest/7" in workflows("show", str(debounced.id))
    data = as_json("show", str(handle.id))
    assert (data["queue"], data["priority"], data["rate_limit"], data["rate_period"]) == ("payments", 5, 100, 60.0)
    assert data["concurrency_counts_parked"] is True


@pytest.mark.django_db
def test_stats_by_queue_counts_each_unfinished_run_once() -> None:
    now = timezone.now()
    make_run()  # due
    make_run(available_at=now + timedelta(hours=1))  # scheduled
    make_run(status="running", worker_id="w-1", started_at=now, available_at=now + timedelta(seconds=30))  # running
    make_run(status="running", available_at=now + timedelta(minutes=5))  # parked
    make_run(status="completed")  # finished: not counted
    blocked_run()
    blocked_run(available_at=now + timedelta(seconds=1))  # the key's probe: still blocked
    blocked_run(status="running")  # woke from a sleep, waits for a place again
    make_run(queue="payments", priority=3)
    text = workflows("stats", "--by-queue")
    lines = text.splitlines()
    assert lines[0].split() == ["QUEUE", "DUE", "SCHEDULED", "BLOCKED", "RUNNING", "PARKED", "TOTAL"]
    rows = {line.split()[0]: [int(n) for n in line.split()[1:]] for line in lines[1:4]}
    assert rows == {
        "default": [1, 1, 0, 1, 1, 4],
        "payments": [1, 0, 3, 0, 0, 4],
        "(all)": [2, 1, 3, 1, 1, 8],
    }
    assert "blocked: waiting for a concurrency place" in text
    assert as_json("stats", "--by-queue")[1] == {
        "queue": "payments",
        "due": 1,
        "scheduled": 0,
        "blocked": 3,
        "running": 0,
        "parked": 0,
        "total": 4,
    }
    # Without --by-queue, stats are by workflow as before.
    assert workflows("stats").splitlines()[0].split()[0] == "WORKFLOW"


@pytest.mark.django_db
def test_stats_by_queue_without_unfinished_runs() -> None:
    make_run(status="completed")
    assert workflows("stats", "--by-queue").strip() == "No unfinished runs."
    assert as_json("stats", "--by-queue") == []


# -- help --------------------------------------------------------------------------


def test_help_lists_every_subcommand_prune_included() -> None:
    from django_openworkflow.management.commands.workflows import Command

    text = " ".join(Command().create_parser("manage.py", "workflows").format_help().split())
    for subcommand in ("list", "show", "start", "cancel", "retry", "signal", "stats", "prune"):
        assert f" {subcommand} " in text, subcommand
    assert "prune the finished runs past their retention" in text


def test_runworkflows_help_says_what_reload_does() -> None:
    from django_openworkflow.management.commands.runworkflows import Command

    text = " ".join(Command().create_parser("manage.py", "runworkflows").format_help().split())
    assert "--reload" in text and "starts it again when a file changes" in text
