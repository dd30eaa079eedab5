"""The testing helpers with the workflow tables on an alias of their own, override_openworkflow, and queues.

``OPENWORKFLOW["DATABASE"] = "other"`` (as docs/howto/testing.md tells a
project with two databases to test it): the eager dispatcher under a
``TestCase`` executes when ``captureOnCommitCallbacks()`` on ``default``
says, and waits for a transaction on ``default``. A drain serves the
queues a worker without ``--queue`` serves unless told others.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from django.db import transaction
from django.test import TestCase, override_settings

from django_openworkflow.conf import owf_settings
from django_openworkflow.models import WorkflowRun
from django_openworkflow.testing import (
    ALL_QUEUES,
    UnservedQueueWarning,
    WorkflowRunner,
    drain,
    override_openworkflow,
)
from tests.fixtures import testing_workflows as wf

EAGER_PATH = "django_openworkflow.testing.EagerDispatcher"
ON_OTHER = {"DATABASE": "other", "POLL_INTERVAL": "20ms"}


@pytest.fixture(autouse=True)
def _calls() -> Any:
    wf.CALLS.clear()
    yield
    wf.CALLS.clear()


def signup_view(name: str) -> Any:
    with transaction.atomic():  # on "default": the view's own writes
        return wf.greet.run({"name": name})


# -- override_openworkflow --


@override_settings(OPENWORKFLOW=ON_OTHER)
def test_override_openworkflow_keeps_the_other_keys() -> None:
    with override_openworkflow(DISPATCH=EAGER_PATH):
        assert (owf_settings.database, owf_settings.dispatch) == ("other", EAGER_PATH)
        assert owf_settings.poll_interval.total_seconds() == 0.02
    with override_settings(OPENWORKFLOW={"DISPATCH": EAGER_PATH}):  # replaces the whole dict, as Django does
        assert owf_settings.raw("POLL_INTERVAL") == "100ms"
    assert owf_settings.dispatch == "worker"


@override_settings(OPENWORKFLOW=ON_OTHER)
def test_override_openworkflow_merges_with_the_settings_in_effect_when_entered() -> None:
    override = override_openworkflow(LEASE="5s")
    with override_settings(OPENWORKFLOW={**ON_OTHER, "DISPATCH": EAGER_PATH}), override:
        assert (owf_settings.dispatch, owf_settings.lease.total_seconds()) == (EAGER_PATH, 5)


# -- eager mode, two databases --


@override_openworkflow(DATABASE="other", DISPATCH=EAGER_PATH)
class EagerWithTwoDatabases(TestCase):
    databases = {"default", "other"}

    def test_the_commit_callbacks_of_default_execute_the_run(self) -> None:
        with self.captureOnCommitCallbacks(execute=True):
            handle = signup_view("two databases")
        self.assertEqual(WorkflowRun.objects.using("other").get(id=handle.id).status, "completed")
        self.assertEqual(handle.result(timeout=0), {"greeting": "hello two databases"})

    def test_a_start_outside_a_transaction_waits_for_the_commit_callbacks_too(self) -> None:
        handle = wf.greet.run({"name": "not yet"})
        self.assertEqual(handle.status(), "pending")  # the test's transaction never commits
        with self.captureOnCommitCallbacks(execute=True):
            handle = wf.greet.run({"name": "now"})
        self.assertEqual(handle.result(timeout=0), {"greeting": "hello now"})


@pytest.mark.django_db(databases=["default", "other"])
@override_openworkflow(DATABASE="other", DISPATCH=EAGER_PATH)
def test_eager_with_two_databases_under_pytest(django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        handle = signup_view("pytest")
    assert handle.result(timeout=0) == {"greeting": "hello pytest"}


@pytest.mark.django_db(databases=["default", "other"], transaction=True)
@override_openworkflow(DATABASE="other", DISPATCH=EAGER_PATH)
def test_eager_waits_for_the_commit_on_default() -> None:
    with transaction.atomic():
        handle = wf.greet.run({"name": "committed"})
        assert handle.status() == "pending" and wf.CALLS == []  # the run's row is there, the view's is not yet
    assert handle.result(timeout=0) == {"greeting": "hello committed"}


@pytest.mark.django_db(databases=["default", "other"], transaction=True)
@override_openworkflow(DATABASE="other", DISPATCH=EAGER_PATH)
def test_eager_executes_nothing_when_the_transaction_on_default_rolls_back() -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        handle = wf.greet.run({"name": "rolled back"})
        raise RuntimeError("the view failed")
    # The run's row committed on its own alias (openworkflow.W030): a drain, or a worker, executes it.
    assert handle.status() == "pending" and wf.CALLS == []
    drain()
    assert handle.result(timeout=0) == {"greeting": "hello rolled back"}


# -- queues --


@pytest.mark.django_db
def test_a_drain_serves_the_default_queue_as_a_worker_does_and_warns_about_the_others() -> None:
    served = wf.greet.run({"name": "default"})
    billing = wf.greet.run({"name": "billing"}, queue="billing")
    with pytest.warns(UnservedQueueWarning, match=r"left unfinished runs on \['billing'\].*queues='\*'"):
        drain()
    assert served.status() == "completed" and billing.status() == "pending"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drain(queues=["billing"])
    assert billing.result(timeout=0) == {"greeting": "hello billing"}


@pytest.mark.django_db
def test_all_queues_with_a_star() -> None:
    handles = [wf.greet.run({"name": queue}, queue=queue) for queue in ("default", "billing", "mail")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        drain(queues=ALL_QUEUES)
    assert [handle.status() for handle in handles] == ["completed"] * 3


@pytest.mark.django_db
def test_a_runners_queues_and_a_drains_own() -> None:
    billing = wf.greet.run({"name": "billing"}, queue="billing")
    default = wf.greet.run({"name": "default"})
    runner = WorkflowRunner(queues=["billing"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # queues chosen: the others are left on purpose, no warning
        assert runner.drain() and billing.status() == "completed"
        other = wf.greet.run({"name": "mail"}, queue="mail")
        runner.drain(queues=["mail"])
    assert other.status() == "completed" and default.status() == "pending"
    runner.drain(queues="*")
    assert default.status() == "completed"


@pytest.mark.django_db
def test_a_queue_name_given_as_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match="list of queue names"):
        drain(queues="billing")


@pytest.mark.django_db
def test_the_fixture_serves_the_default_queue(workflow_runner: WorkflowRunner) -> None:
    billing = wf.greet.run({"name": "billing"}, queue="billing")
    with pytest.warns(UnservedQueueWarning):
        workflow_runner.drain()
    assert billing.status() == "pending"
    workflow_runner.drain(queues=["billing"])
    assert billing.status() == "completed"


@pytest.mark.django_db
@override_openworkflow(DISPATCH=EAGER_PATH)
def test_eager_mode_executes_a_run_of_any_queue(django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        handle = wf.greet.run({"name": "billing"}, queue="billing")
    assert handle.result(timeout=0) == {"greeting": "hello billing"}
