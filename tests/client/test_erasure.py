"""Erasure by subject (client/erasure.py, store/erasure.py): ``forget`` leaves none of an object's payloads.

Each test runs a real (in-process) worker on the test database and reads
the tables' raw rows with plain SQL, not through the fields that decrypt.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow import ForgetRefused, RetryPolicy, forget, send_event, send_signal, workflow
from django_openworkflow.client import operations
from django_openworkflow.client.approvals import decide_approval
from django_openworkflow.client.human_tasks import submit_task
from django_openworkflow.errors import OperationRefused
from django_openworkflow.models import Approval, StepAttempt, WorkflowRun
from django_openworkflow.store import dashboard, get_backend, queries
from django_openworkflow.store.erasure import ERASED_TEXT, Outcome, erase_run
from tests.conftest import is_parked
from tests.fixtures.testapp.models import Order
from tests.test_encryption import KEY_A, encrypted, raw_rows, tables_holding

pytestmark = pytest.mark.django_db(transaction=True)

FORGET = "Zq7xForgetAlpha"
KEEP = "Zq7xKeepBravo"
_failed_once: set[str] = set()


@workflow(name="erasure-child")
def child(ctx: Any) -> Any:
    return ctx.step.run("echo", lambda: f"child saw {ctx.input['secret']}")


@workflow(
    name="erasure-every-path",
    retry_policy=RetryPolicy(maximum_attempts=1),
    step_retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="10ms"),
)
def every_path(ctx: Any) -> Any:
    """Writes its input's secret through every payload path, then fails with it in its error."""
    secret = ctx.input["secret"]
    first = ctx.step.run("first", lambda: {"echo": secret})

    def fails_once() -> str:
        if str(ctx.run_id) not in _failed_once:
            _failed_once.add(str(ctx.run_id))
            raise ValueError(f"first try failed with {secret}")
        return f"second try {secret}"

    ctx.step.run("fails-once", fails_once)
    ctx.step.run_workflow(child, {"secret": secret})
    ctx.publish("progress", {"note": secret})
    ctx.stream("log").write(f"line {secret}")
    ctx.step.wait_for_signal("go", timeout="1h")
    ctx.step.wait_for_event("paid", event="erasure.paid", match={"ref": secret}, timeout="1h")
    ctx.wait_for_approval(
        "ok", assignees=["user:ada", "user:bob"], details=f"approve {secret}", timeout="1h", approvals_required=2
    )
    note = "tests.fixtures.testapp.forms.NoteForm"
    ctx.wait_for_input("note", form=note, assignees="user:ada", initial={"note": secret}, timeout="1h")
    if ctx.input.get("fail"):
        ctx.step.run("last", lambda: (_ for _ in ()).throw(ValueError(f"last {secret}")))
    return {"first": first}


@workflow(name="erasure-waits")
def waits(ctx: Any) -> Any:
    return ctx.step.wait_for_signal("never", timeout="1h")


@workflow(name="erasure-compensates", compensate_on_cancel=True)
def compensates(ctx: Any) -> Any:
    ctx.step.run("book", lambda: {"ref": ctx.input["secret"]}, compensate=lambda booked: None)
    return ctx.step.wait_for_signal("never", timeout="1h")


@pytest.fixture
def ada(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ada", password="pw", is_staff=True)


def _run_every_path(run_worker: Any, ada: Any, order: Order, secret: str, fail: bool) -> Any:
    handle = every_path.run({"secret": secret, "fail": fail}, subject=order)
    open_waits = StepAttempt.objects.filter(workflow_run_id=handle.id, status="running")
    run_worker(until=lambda: is_parked(handle) and open_waits.filter(step_name="go").exists())
    send_signal(handle.id, "go", {"said": secret})
    run_worker(until=lambda: is_parked(handle) and open_waits.filter(step_name="paid").exists())
    assert send_event("erasure.paid", {"ref": secret, "note": secret}) == 1
    run_worker(until=lambda: Approval.objects.filter(workflow_run_id=handle.id).exists() and is_parked(handle))
    approval = Approval.objects.get(workflow_run_id=handle.id).id
    decide_approval(approval, ada, approved=True, comment=f"yes {secret}")  # a sign-off, kept until bob's
    bob = type(ada).objects.get_or_create(username="bob")[0]
    decide_approval(approval, bob, approved=True, comment=f"also {secret}")
    task = Approval.objects.filter(workflow_run_id=handle.id).exclude(id=approval)
    run_worker(until=lambda: task.exists() and is_parked(handle))
    submit_task(task.get().id, ada, {"note": f"noted {secret}"})
    run_worker(until=lambda: handle.status() == ("failed" if fail else "completed"))
    return handle


def _shape() -> Any:
    """What must not change: every run's and step's status, kind, times and counts, the list and dashboard counts."""
    runs = list(WorkflowRun.objects.order_by("id").values_list("id", "status", "attempts", "created_at", "finished_at"))
    steps = list(StepAttempt.objects.order_by("id").values_list("id", "step_name", "kind", "status", "finished_at"))
    board = dashboard.read(timezone.now(), 1, 60)
    return runs, steps, queries.status_counts(), board.finished, board.in_flight


def _rows_with(marker: str) -> dict[str, list[Any]]:
    return {table: [row for row in rows if marker in repr(row)] for table, rows in raw_rows().items()}


def test_forget_erases_every_payload_of_the_subjects_runs_and_keeps_their_shape(
    run_worker: Any, ada: Any, admin_client: Any
) -> None:
    alpha, bravo = Order.objects.create(reference="alpha"), Order.objects.create(reference="bravo")
    completed = _run_every_path(run_worker, ada, alpha, FORGET, fail=False)
    failed = _run_every_path(run_worker, ada, alpha, FORGET, fail=True)
    kept = _run_every_path(run_worker, ada, bravo, KEEP, fail=True)
    assert set(tables_holding(FORGET)) >= {
        "openworkflow_run", "openworkflow_step_attempt", "openworkflow_signal", "openworkflow_event",
        "openworkflow_published_value", "openworkflow_stream_chunk", "openworkflow_approval",
    }  # fmt: skip
    shape, kept_rows = _shape(), _rows_with(KEEP)
    children = list(WorkflowRun.objects.filter(workflow_name="erasure-child", input__secret=FORGET).values_list("id"))
    assert len(children) == 2

    done = forget(alpha, by="dpo")

    assert tables_holding(FORGET) == []
    assert _shape() == shape  # the same rows, statuses, times and counts: the list and dashboard count them
    assert _rows_with(KEEP) == kept_rows  # the other subject's rows, byte for byte
    assert set(done.erased) == {completed.id, failed.id, *(run_id for (run_id,) in children)}
    assert done.already == [] and done.canceled == [] and str(done.subject) == f"testapp.order:{alpha.pk}"
    run = WorkflowRun.objects.get(id=failed.id)
    assert run.input is None and run.output is None and run.erased_by == "dpo" and run.erased_at is not None
    assert run.error["type"] == "StepFailed" and run.error["message"] == ERASED_TEXT  # the type still counts
    assert WorkflowRun.objects.get(id=kept.id).erased_at is None

    # The run's page says so; the run list shows it as before.
    page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{failed.id}/change/")
    assert page.status_code == 200 and "Payloads erased" in page.text and "dpo" in page.text
    # Forgetting twice erases nothing more; an erased run cannot run again on an input it no longer has.
    again = forget(f"testapp.order:{alpha.pk}")
    assert again.erased == [] and set(again.already) == set(done.erased)
    for operation in (operations.retry_from_failed_step, operations.rerun):
        with pytest.raises(OperationRefused, match="payloads were erased"):
            operation(failed.id)


def test_a_live_run_is_refused_with_its_id_or_canceled_first(run_worker: Any) -> None:
    order = Order.objects.create(reference="live")
    finished = child.run({"secret": FORGET}, subject=order)
    live = waits.run({"secret": FORGET}, subject=order)
    run_worker(until=lambda: finished.status() == "completed" and is_parked(live))
    before = raw_rows()

    with pytest.raises(ForgetRefused) as refused:
        forget(order)
    assert refused.value.run_ids == [live.id] and str(live.id) in str(refused.value)
    # The store checks again in the erasing transaction: a run made due again meanwhile, or deleted, is left.
    assert erase_run(get_backend(), live.id, "") is Outcome.LIVE
    assert erase_run(get_backend(), uuid.uuid4(), "") is Outcome.GONE
    assert raw_rows() == before  # nothing erased, the finished run neither

    done = forget(order, cancel_live=True)
    assert done.canceled == [live.id] and set(done.erased) == {finished.id, live.id}
    assert live.status() == "canceled" and tables_holding(FORGET) == []

    # A run that compensates on cancel is still live once asked to cancel: refused, erased once it ended.
    undoing = compensates.run({"secret": FORGET}, subject=order)
    run_worker(until=lambda: is_parked(undoing))
    with pytest.raises(ForgetRefused, match="being canceled"):
        forget(order, cancel_live=True)
    assert FORGET in repr(raw_rows()["openworkflow_run"])
    run_worker(until=lambda: undoing.status() == "canceled")
    assert forget(order).erased == [undoing.id] and tables_holding(FORGET) == []


def test_with_encryption_the_erased_values_read_as_erased(run_worker: Any) -> None:
    with encrypted(KEY_A):
        alpha, bravo = Order.objects.create(reference="alpha"), Order.objects.create(reference="bravo")
        forgotten = child.run({"secret": FORGET}, subject=alpha)
        kept = child.run({"secret": KEEP}, subject=bravo)
        run_worker(until=lambda: forgotten.status() == kept.status() == "completed")
        assert forget(alpha).erased == [forgotten.id]
        erased, other = WorkflowRun.objects.get(id=forgotten.id), WorkflowRun.objects.get(id=kept.id)
        assert erased.input is None and erased.output is None and erased.erased_at is not None
        assert StepAttempt.objects.get(workflow_run_id=forgotten.id).output is None
        assert other.input == {"secret": KEEP} and kept.result() == f"child saw {KEEP}"
