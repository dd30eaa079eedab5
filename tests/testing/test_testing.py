"""django_openworkflow.testing: drain on the test's thread, time travel, eager mode, the pytest fixture.

Real databases, no mocks. Most tests run inside pytest-django's test
transaction (as a Django ``TestCase`` does); the ones marked
``transaction=True`` commit for real.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import TestCase, override_settings
from django.utils import timezone

from django_openworkflow import get_run, send_event
from django_openworkflow.engine.execute import Outcome
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.testing import DrainError, WorkflowRunner, advance, drain, run_workflows
from tests.conftest import CEILING, ROOT
from tests.fixtures import testing_workflows as wf

# What these tests tell apart is a drain that skips an hour's timer (or stops at its own timeout)
# from one that waits it out or loops: far from any machine's speed, busy or not, on either side.
SKIPPED_NOT_WAITED = 30.0

pytestmark = pytest.mark.django_db

EAGER = override_settings(OPENWORKFLOW={"DISPATCH": "django_openworkflow.testing.EagerDispatcher"})


@pytest.fixture(autouse=True)
def _calls() -> Iterator[None]:
    wf.CALLS.clear()
    wf._flaky_failures.clear()
    yield
    wf.CALLS.clear()


def signup_view(name: str) -> Any:
    """What a view does: write its rows and start the run in one transaction."""
    with transaction.atomic():
        return wf.greet.run({"name": name})


def steps(handle: Any) -> list[tuple[str, str, str]]:
    rows = StepAttempt.objects.filter(workflow_run_id=handle.id).order_by("id")
    return list(rows.values_list("step_name", "kind", "status"))


# -- drain --


def test_drain_completes_a_run_a_view_started_inside_the_test_transaction() -> None:
    assert connection.in_atomic_block  # pytest-django's test transaction, as in a TestCase
    handle = signup_view("ada")
    assert handle.status() == "pending"
    slices = drain()
    assert [s.outcome for s in slices] == [Outcome.COMPLETED]
    assert handle.result(timeout=0) == {"greeting": "hello ada"}
    assert wf.CALLS == ["hello ada"]


@pytest.mark.django_db(transaction=True)
def test_drain_with_committed_writes() -> None:
    assert not connection.in_atomic_block
    handle = signup_view("grace")
    drain()
    assert handle.result(timeout=0) == {"greeting": "hello grace"}


class _DueBetweenClaimAndSkip(WorkflowRunner):
    """Its first empty claim puts the run 5 ms ahead, then waits it out: the run falls due before the skip looks."""

    run_id: Any = None

    def _claim_one(self, scope: Any, served: Any) -> Any:
        claimed = super()._claim_one(scope, served)
        if claimed is None and self.run_id is not None:
            WorkflowRun.objects.filter(id=self.run_id).update(available_at=self.store.now() + timedelta(milliseconds=5))
            self.run_id = None
            time.sleep(0.02)
        return claimed


def test_drain_executes_a_run_that_falls_due_between_its_claim_and_its_skip() -> None:
    # A retry's short backoff can end just then: the skip no longer sees it as future, the claim saw it as future.
    handle = signup_view("lin")
    WorkflowRun.objects.filter(id=handle.id).update(available_at=timezone.now() + timedelta(hours=1))
    runner = _DueBetweenClaimAndSkip()
    runner.run_id = handle.id
    runner.drain()
    assert handle.result(timeout=0) == {"greeting": "hello lin"}


def test_drain_with_nothing_to_do_returns_no_slices() -> None:
    assert drain() == []


def test_a_one_hour_sleep_completes_in_well_under_a_second() -> None:
    handle = wf.nap.run({"for": "1h"})
    started = time.monotonic()
    drain()
    assert time.monotonic() - started < SKIPPED_NOT_WAITED  # the hour was skipped, not waited
    assert handle.result(timeout=0) == "after"
    assert wf.CALLS == ["before", "after"]
    assert steps(handle) == [
        ("before", "run", "completed"),
        ("nap", "sleep", "completed"),
        ("after", "run", "completed"),
    ]


def test_without_skip_sleeps_a_sleep_waits_until_time_is_advanced() -> None:
    handle = wf.nap.run({"for": "1h"})
    drain(skip_sleeps=False)
    assert handle.fetch().is_parked and wf.CALLS == ["before"]
    advance("59m")
    drain(skip_sleeps=False)
    assert handle.fetch().is_parked
    advance("2m")
    drain(skip_sleeps=False)
    assert handle.result(timeout=0) == "after"


def test_skip_sleeps_covers_retry_backoffs_and_child_runs() -> None:
    handle = wf.parent.run({"key": "k"})
    drain()
    assert handle.result(timeout=0) == {"flaky": "k ok", "child": 42}
    assert wf._flaky_failures == {"k": 3}
    (child,) = handle.children()
    assert child.status() == "completed"


def test_skip_sleeps_covers_scheduled_starts() -> None:
    handle = wf.greet.run({"name": "later"}, available_at="2h")
    drain(skip_sleeps=False)
    assert handle.status() == "pending"
    drain()
    assert handle.result(timeout=0) == {"greeting": "hello later"}


# -- waits and their timeouts --


def test_a_signal_wait_is_not_skipped_and_takes_a_signal_sent_later() -> None:
    handle = wf.approval.run()
    drain()
    assert handle.fetch().is_parked  # waiting for the signal: sleeps are skipped, waits are not
    handle.signal("approve", {"by": "grace"})
    drain()
    assert handle.result(timeout=0) == {"outcome": "approved", "by": "grace"}


def test_advancing_past_a_signal_waits_timeout_times_it_out() -> None:
    handle = wf.approval.run()
    drain()
    advance("23h")
    drain()
    assert handle.fetch().is_parked
    advance("2h")
    started = time.monotonic()
    drain()
    assert time.monotonic() - started < SKIPPED_NOT_WAITED  # the hours were skipped, not waited
    assert handle.result(timeout=0) == {"outcome": "escalated"}
    assert ("approve", "signal", "completed") in steps(handle)


def test_advancing_past_an_event_waits_timeout() -> None:
    handle = wf.on_payment.run({"order": 7})
    drain()
    assert send_event("payment", {"order": 8}) == 0
    advance("3h")
    drain()
    assert handle.result(timeout=0) is None


def test_advance_moves_deadlines_too() -> None:
    handle = wf.approval.run(deadline_at="2h")
    drain()
    advance("3h")
    drain()
    error = handle.fetch().error
    assert handle.status() == "failed" and error["type"] == "DeadlineExceeded"


def test_advance_returns_how_many_unfinished_runs_moved() -> None:
    wf.approval.run()
    done = wf.greet.run({"name": "x"})
    drain(run_ids=[done])
    assert advance("1m") == 1


def test_a_slow_step_in_the_test_transaction() -> None:
    # The engine's watchdog would record the slow step's start from its own thread and
    # connection, which cannot see the test's uncommitted run (and, on MariaDB, would wait
    # for the test transaction's locks): a drain keeps it out of its slices.
    handle = wf.slow_step.run()
    started = time.monotonic()
    drain()
    assert time.monotonic() - started < SKIPPED_NOT_WAITED  # a lock wait would take innodb's 50 s
    assert handle.result(timeout=0) == "slow done"


def test_a_run_over_a_rate_limit_waits_for_advance_instead_of_looping() -> None:
    first, second = wf.rate_limited.run(1), wf.rate_limited.run(2)
    started = time.monotonic()
    drain()  # the claim puts the second off for an hour: skipping that would only loop
    assert time.monotonic() - started < SKIPPED_NOT_WAITED
    assert first.status() == "completed" and second.status() == "pending"
    advance("1h")
    drain()
    assert second.result(timeout=0) == "go 2"


# -- limits of a drain --


def test_until_stops_the_drain_and_says_when_it_cannot_be_met() -> None:
    first = wf.greet.run({"name": "one"})
    second = wf.greet.run({"name": "two"})
    drain(until=lambda: first.status() == "completed")
    assert first.status() == "completed" and second.status() == "pending"
    waiting = wf.approval.run()
    with pytest.raises(DrainError, match="until condition is still false"):
        drain(until=lambda: waiting.status() == "completed")


def test_a_run_that_never_ends_fails_the_drain_instead_of_hanging() -> None:
    wf.forever.run()
    started = time.monotonic()
    with pytest.raises(DrainError, match="testing-forever"):
        drain(timeout=0.5)
    assert time.monotonic() - started < SKIPPED_NOT_WAITED  # the drain's timeout ended it, not the hour of ticks


def test_run_ids_limit_the_drain_to_those_runs_and_their_children() -> None:
    other = wf.greet.run({"name": "other"})
    mine = wf.parent.run({"key": "m"})
    drain(run_ids=[mine])
    assert mine.status() == "completed" and other.status() == "pending"


# -- the context manager --


def test_run_workflows_drains_when_the_block_ends() -> None:
    with run_workflows() as runner:
        handle = signup_view("in a block")
        assert handle.status() == "pending"
    assert handle.result(timeout=0) == {"greeting": "hello in a block"}
    assert [s.outcome for s in runner.slices] == [Outcome.COMPLETED]


def test_run_workflows_drains_nothing_when_the_block_raises() -> None:
    with pytest.raises(RuntimeError), run_workflows():
        handle = wf.greet.run({"name": "x"})
        raise RuntimeError("boom")
    assert handle.status() == "pending"


# -- eager mode --


@pytest.mark.django_db(transaction=True)
@EAGER
def test_eager_mode_executes_a_run_when_its_start_commits() -> None:
    with transaction.atomic():
        handle = wf.nap.run({"for": "1h"})
        assert handle.status() == "pending" and wf.CALLS == []  # not before the commit
    assert handle.result(timeout=0) == "after"
    assert wf.CALLS == ["before", "after"]


@pytest.mark.django_db(transaction=True)
@EAGER
def test_eager_mode_executes_nothing_when_the_start_rolls_back() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = wf.greet.run({"name": "rolled back"})
        raise RuntimeError("the view failed")
    assert not WorkflowRun.objects.filter(id=handle.id).exists()
    assert wf.CALLS == []


@pytest.mark.django_db(transaction=True)
@EAGER
def test_eager_mode_outside_a_transaction_executes_at_once_with_children() -> None:
    handle = wf.parent.run({"key": "e"})
    assert handle.result(timeout=0) == {"flaky": "e ok", "child": 42}


@pytest.mark.django_db(transaction=True)
@EAGER
def test_eager_mode_stops_at_a_signal_wait_and_drain_goes_on() -> None:
    handle = wf.approval.run()
    assert handle.fetch().is_parked
    handle.signal("approve", {"by": "ada"})
    drain()
    assert handle.result(timeout=0) == {"outcome": "approved", "by": "ada"}


@pytest.mark.django_db(transaction=True)
@EAGER
def test_eager_mode_a_run_started_inside_a_step_runs_after_that_slice() -> None:
    handle = wf.starter.run()
    started = get_run(handle.result(timeout=0))
    assert started.result(timeout=0) == {"greeting": "hello from a step"}


@EAGER
def test_eager_mode_in_the_test_transaction_needs_the_commit_callbacks(
    django_capture_on_commit_callbacks: Any,
) -> None:
    handle = wf.greet.run({"name": "not yet"})
    assert handle.status() == "pending"  # the test transaction never commits
    with django_capture_on_commit_callbacks(execute=True):
        handle = wf.greet.run({"name": "captured"})
    assert handle.result(timeout=0) == {"greeting": "hello captured"}


# -- a Django TestCase --


class DrainInsideTestCase(TestCase):
    """TestCase wraps each test in a transaction that never commits: the helpers run on its connection."""

    def test_run_workflows_in_a_testcase(self) -> None:
        self.assertTrue(connection.in_atomic_block)
        with run_workflows():
            handle = signup_view("testcase")
        self.assertEqual(handle.result(timeout=0), {"greeting": "hello testcase"})

    def test_time_travel_in_a_testcase(self) -> None:
        handle = wf.approval.run()
        drain()
        advance("1d")
        drain()
        self.assertEqual(handle.result(timeout=0), {"outcome": "escalated"})

    @EAGER
    def test_eager_mode_in_a_testcase(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            handle = signup_view("eager testcase")
        self.assertEqual(handle.result(timeout=0), {"greeting": "hello eager testcase"})


# -- the pytest fixture --


def test_the_workflow_runner_fixture(workflow_runner: WorkflowRunner) -> None:
    handle = wf.approval.run()
    workflow_runner.drain()
    workflow_runner.advance("25h")
    workflow_runner.drain()
    assert handle.result(timeout=0) == {"outcome": "escalated"}
    assert [s.outcome for s in workflow_runner.slices] == [Outcome.PARKED, Outcome.COMPLETED]


def test_the_plugin_loads_without_pytest_django_and_imports_no_settings(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_plugin.py").write_text(
        textwrap.dedent(
            """
            import django.conf

            def test_fixture_is_there(workflow_runner, pytestconfig):
                assert pytestconfig.pluginmanager.hasplugin("django_openworkflow")
                assert not pytestconfig.pluginmanager.hasplugin("django")
                assert type(workflow_runner).__name__ == "WorkflowRunner"
                assert not django.conf.settings.configured
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-q", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode == 0, done.stdout + done.stderr
