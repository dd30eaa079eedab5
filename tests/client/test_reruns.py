"""Re-run from a step (client/operations.py, client/reruns.py): copied steps, the steps that run again, refusals."""

from __future__ import annotations

import uuid

import pytest
from django.db.models import Count

from django_openworkflow.client import operations
from django_openworkflow.client.handle import get_run, send_signal
from django_openworkflow.client.listing import run_json
from django_openworkflow.errors import OperationRefused, RunNotFound
from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING, wait_until
from tests.fixtures.rerun_workflows import C_BROKEN, rerun_abc, rerun_catches, rerun_compensated, rerun_parent
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def effects(run_id):
    return dict(SideEffect.objects.filter(run_id=run_id).values_list("step").annotate(n=Count("id")))


@pytest.fixture
def c_broken():
    SideEffect.objects.create(run_id=C_BROKEN, step="c-broken")


def fix_c():
    SideEffect.objects.filter(run_id=C_BROKEN).delete()


def test_a_rerun_from_b_copies_a_and_runs_b_and_c_again_in_a_worker_process(workers, c_broken):
    source = rerun_abc.run({"n": 1})
    workers.start("--poll", "20ms")
    wait_until(lambda: source.status() == "failed")
    token = StepAttempt.objects.get(workflow_run_id=source.id, step_name="a").output
    fix_c()
    new_id = operations.rerun_from_step(source.id, "b")
    rerun = get_run(new_id)
    assert rerun.result(timeout=CEILING) == {"a": token, "c": f"{token}-b-c", "signal": None}
    # a's code did not run in the new run: its result is the source run's, copied.
    assert effects(new_id) == {"b": 1, "c": 1}
    a_source = StepAttempt.objects.get(workflow_run_id=source.id, step_name="a")
    copied = StepAttempt.objects.get(workflow_run_id=new_id, step_name="a")
    assert (copied.status, copied.output, copied.copied_from) == ("completed", token, a_source.id)
    assert StepAttempt.objects.filter(workflow_run_id=new_id, copied_from__isnull=False).count() == 1
    run = WorkflowRun.objects.get(id=new_id)
    assert (run.rerun_of_id, run.rerun_from_step, run.input) == (source.id, "b", {"n": 1})
    data = run_json(run)
    assert (data["rerun_of"], data["rerun_from_step"]) == (str(source.id), "b")
    assert source.status() == "failed"  # the source run stays as it was


def test_a_rerun_from_the_failed_step_and_from_the_first_step(run_worker, c_broken):
    source = rerun_abc.run()
    run_worker()
    fix_c()
    from_c = operations.rerun_from_step(source.id, "c")
    from_a = operations.rerun_from_step(source.id, "a")
    run_worker()
    assert get_run(from_c).status() == get_run(from_a).status() == "completed"
    assert effects(from_c) == {"c": 1}
    assert effects(from_a) == {"a": 1, "b": 1, "c": 1}
    assert not StepAttempt.objects.filter(workflow_run_id=from_a, copied_from__isnull=False).exists()


def test_sleeps_and_received_signals_before_the_step_are_copied(run_worker, c_broken):
    source = rerun_abc.run({"wait": True})
    run_worker(until=lambda: StepAttempt.objects.filter(workflow_run_id=source.id, step_name="go").exists())
    send_signal(source.id, "go", {"ok": 1})
    run_worker()
    assert source.status() == "failed"
    fix_c()
    new_id = operations.rerun_from_step(source.id, "b")
    run_worker()
    # Neither slept nor waited again: the signal's data is the source's.
    assert get_run(new_id).result(timeout=0)["signal"] == {"ok": 1}
    kinds = list(
        StepAttempt.objects.filter(workflow_run_id=new_id, copied_from__isnull=False).values_list("kind", flat=True)
    )
    assert kinds == ["run", "sleep", "signal"]
    # From the wait itself: it waits again, for a signal sent to the new run.
    again = operations.rerun_from_step(source.id, "go")
    run_worker()
    assert WorkflowRun.objects.get(id=again).status == "running"
    assert StepAttempt.objects.get(workflow_run_id=again, step_name="go").status == "running"


def test_a_step_after_a_child_is_refused_and_the_child_step_itself_is_not(run_worker):
    source = rerun_parent.run()
    run_worker()
    assert source.status() == "completed"
    with pytest.raises(OperationRefused, match=r"step 'rerun-leaf' before it started child run [0-9a-f]{8}"):
        operations.rerun_from_step(source.id, "b")
    new_id = operations.rerun_from_step(source.id, "rerun-leaf")
    run_worker()
    assert get_run(new_id).result(timeout=0) == ["a", "leaf", "b"]
    child = StepAttempt.objects.get(workflow_run_id=new_id, step_name="rerun-leaf").child_workflow_run_id
    old_child = StepAttempt.objects.get(workflow_run_id=source.id, step_name="rerun-leaf").child_workflow_run_id
    assert child is not None and child != old_child  # a child of its own
    assert effects(new_id) == {"b": 1}


def test_a_step_after_a_compensated_or_failed_step_is_refused(run_worker):
    source = rerun_compensated.run()
    run_worker()
    assert source.status() == "failed"
    assert effects(source.id) == {"charge": 1, "ship": 1, "refund": 1}
    for step in ("ship", "compensate:charge"):
        with pytest.raises(OperationRefused, match=r"step 'charge' before it was undone by its compensation"):
            operations.rerun_from_step(source.id, step)
    assert operations.rerun_from_step(source.id, "charge")
    caught = rerun_catches.run()
    run_worker()
    assert caught.status() == "completed"
    with pytest.raises(OperationRefused, match=r"step 'flaky' before it had not completed \(failed\)"):
        operations.rerun_from_step(caught.id, "after")


def test_unknown_steps_and_runs_are_refused_with_the_steps_it_has(run_worker, c_broken):
    source = rerun_abc.run()
    run_worker()
    with pytest.raises(OperationRefused, match=r"it has no step 'd' in its journal \(its steps: a, b, c\)"):
        operations.rerun_from_step(source.id, "d")
    with pytest.raises(OperationRefused, match="must be a step's name"):
        operations.rerun_from_step(source.id, "")
    with pytest.raises(RunNotFound):
        operations.rerun_from_step(uuid.uuid4(), "a")
    with pytest.raises(RunNotFound):
        operations.rerun_from_step("not-a-uuid", "a")
    pending = rerun_abc.run()
    with pytest.raises(OperationRefused, match=r"its journal is empty"):
        operations.rerun_from_step(pending.id, "a")
    assert WorkflowRun.objects.count() == 2  # nothing was started


def test_a_version_this_process_does_not_have_is_refused(run_worker, c_broken):
    source = rerun_abc.run()
    run_worker()
    WorkflowRun.objects.filter(id=source.id).update(version="v-gone")
    with pytest.raises(OperationRefused, match="this process has no workflow 'rerun-abc' version 'v-gone'"):
        operations.rerun_from_step(source.id, "b")


def test_a_plain_rerun_keeps_a_link_too(run_worker, c_broken):
    source = rerun_abc.run()
    run_worker()
    new_id = operations.rerun(source.id)
    run = WorkflowRun.objects.get(id=new_id)
    assert (run.rerun_of_id, run.rerun_from_step) == (source.id, None)
    assert (run_json(run)["rerun_of"], run_json(run)["rerun_from_step"]) == (str(source.id), None)
