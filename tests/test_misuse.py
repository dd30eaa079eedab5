"""Bad input and misuse: each a clear error, nothing lost (issue 7's table)."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.test import override_settings

from django_openworkflow import PayloadError, StepUsageError, get_run, send_event, send_signal, workflow
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING
from tests.fixtures.testapp.workflows import approval, three_steps

pytestmark = pytest.mark.django_db(transaction=True)
kept_contexts: list = []
during_step: list = []
NASTY = "x'); DROP TABLE openworkflow_run; -- \" \\ % _ %s {}"


@workflow(name="test-bad-step-names")
def bad_step_names(ctx):
    name = ctx.input["name"]
    try:
        ctx.step.run(name, lambda: 1)
    except StepUsageError as exc:
        return str(exc)
    return "accepted"


@workflow(name="test-keeps-ctx")
def keeps_ctx(ctx):
    kept_contexts.append(ctx)
    return ctx.step.run("only", lambda: 1)


@workflow(name="test-deleted-mid-step")
def deleted_mid_step(ctx):
    ctx.step.run("one", lambda: during_step.pop()() if during_step else None)
    return ctx.step.run("two", lambda: 2)


@workflow(name=NASTY[:200])
def nasty_workflow(ctx):
    return ctx.step.run(NASTY[:200], lambda: {NASTY: NASTY})


def claim_one():
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    return claimed


@override_settings(OPENWORKFLOW={"MAX_PAYLOAD_BYTES": 1000})
def test_payload_over_the_limit_names_its_size():
    with pytest.raises(
        PayloadError, match=r"input of workflow 'three-steps' is 1\d{3} bytes of JSON, over the limit of 1000"
    ):
        three_steps.run({"blob": "x" * 1100})
    assert not WorkflowRun.objects.exists()


@pytest.mark.parametrize("name", ["", "   ", "n" * 241, 42, None])
def test_bad_step_names_are_clear_errors(run_worker, name):
    handle = bad_step_names.run({"name": name})
    run_worker()
    assert "step name" in handle.result(timeout=CEILING)


def test_step_api_outside_its_run_is_a_clear_error(run_worker):
    kept_contexts.clear()
    handle = keeps_ctx.run()
    run_worker()
    assert handle.result() == 1
    with pytest.raises(StepUsageError, match="outside its workflow run's execution"):
        kept_contexts[0].step.run("later", lambda: 2)


def test_run_row_deleted_while_a_worker_executes_it():
    handle = deleted_mid_step.run()
    claimed = claim_one()
    during_step.append(lambda: WorkflowRun.objects.filter(id=handle.id).delete())
    assert execute_slice(get_backend(), claimed).outcome == Outcome.LEASE_LOST
    assert not WorkflowRun.objects.exists() and not StepAttempt.objects.exists()


def test_cancel_racing_completion_ends_one_way_only():
    handles = [three_steps.run({"start": i}) for i in range(30)]
    worker = Worker(concurrency=4, poll_interval="5ms")
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        canceled = [h.cancel() for h in handles]
    finally:
        worker.stop()
        thread.join(30)
    for handle, was_canceled in zip(handles, canceled):
        run = handle.fetch()
        if was_canceled:
            assert run.status == "canceled" and run.output is None
        else:
            assert run.status == "completed" and run.output is not None


def test_sql_metacharacters_in_names_keys_and_payloads_are_just_data(run_worker):
    handle = nasty_workflow.run({NASTY: [NASTY]}, idempotency_key=NASTY[:200])
    assert nasty_workflow.run({}, idempotency_key=NASTY[:200]) == handle
    run_worker()
    assert handle.result() == {NASTY: NASTY}
    assert get_run(handle.id).fetch().input == {NASTY: [NASTY]}
    waiting = approval.run({"timeout": "1h"})
    run_worker()
    assert send_signal(waiting.id, NASTY[:200], {NASTY: 1}, idempotency_key=NASTY[:200]) is False
    assert send_event(NASTY[:200], {NASTY: NASTY}, idempotency_key=NASTY[:200]) == 0
    assert WorkflowRun.objects.count() == 2
