"""``workflows list`` and ``show`` name retrying and waiting runs, and ``--json`` adds ``display_status``."""

from __future__ import annotations

import pytest
from django.core.management import CommandError

from django_openworkflow.store import get_backend
from django_openworkflow.testing import drain
from tests.cli.helpers import as_json, workflows
from tests.fixtures.testapp.workflows import always_fails, approval, keeps_failing, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_list_says_why_a_run_retries_and_what_a_run_waits_for() -> None:
    retrying = keeps_failing.run()
    waiting = approval.run({"timeout": "2h"})
    drain(skip_sleeps=False)
    lines = {line.split()[0]: line for line in workflows("list").splitlines()[1:]}
    assert "retrying · step 'charge' · attempt 1 of 10 failed · next in 59 m" in lines[str(retrying.id)]
    assert "last error ValueError: card declined" in lines[str(retrying.id)]
    assert "waiting · waiting for signal 'approval' · times out in 1 h 59 m" in lines[str(waiting.id)]
    rows = {row["id"]: row for row in as_json("list")}
    # status stays what it was (parked for both); display_status tells them apart.
    assert (rows[str(retrying.id)]["status"], rows[str(retrying.id)]["display_status"]) == ("parked", "retrying")
    assert (rows[str(waiting.id)]["status"], rows[str(waiting.id)]["display_status"]) == ("parked", "waiting")
    assert [row["id"] for row in as_json("list", "--status", "retrying")] == [str(retrying.id)]
    assert [row["id"] for row in as_json("list", "--status", "waiting")] == [str(waiting.id)]
    assert as_json("list", "--status", "parked") == []


def test_show_names_the_state_and_the_last_error() -> None:
    retrying = keeps_failing.run()
    waiting = approval.run()
    drain(skip_sleeps=False)
    text = workflows("show", str(retrying.id))
    assert "status           retrying (step 'charge' · attempt 1 of 10 failed · next in 59 m" in text
    assert "last error       ValueError: card declined" in text
    assert "status           waiting (waiting for signal 'approval' · times out in 59 m" in workflows(
        "show", str(waiting.id)
    )
    shown = as_json("show", str(waiting.id))
    assert (shown["status"], shown["display_status"]) == ("parked", "waiting")


def test_attempts_count_the_attempts_made() -> None:
    done = three_steps.run()
    failed = always_fails.run()
    drain()
    get_backend().retry_failed_run(failed.id)
    drain()
    lines = {line.split()[0]: line.split() for line in workflows("list").splitlines()}
    column = lines["ID"].index("ATTEMPTS")
    assert lines[str(done.id)][column] == "1"  # not 0: the run made one attempt
    assert lines[str(failed.id)][column] == "2"  # two real failures: two attempts, not three
    assert "attempts         2 (2 failed)" in workflows("show", str(failed.id))
    assert as_json("show", str(failed.id))["attempts"] == 2  # the stored count of failed attempts


def test_retry_from_the_failed_step_names_a_retrying_or_waiting_run_as_pages_do() -> None:
    retrying = keeps_failing.run()
    waiting = approval.run()
    drain(skip_sleeps=False)
    for run, state in ((retrying, "retrying"), (waiting, "waiting")):
        with pytest.raises(CommandError, match=rf"it has not failed \(it is {state}\)"):
            workflows("retry", "--from-failed-step", str(run.id))
