"""``ctx.wait_for_input``: a task's form validated by the form, delivered once as exact JSON, on real workers."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile

from django_openworkflow import submit_task, workflow
from django_openworkflow.client.approvals import approvals_for, decide_approval
from django_openworkflow.client.human_tasks import open_task
from django_openworkflow.errors import (
    ApprovalClosed,
    ApprovalNotAssigned,
    TaskFormInvalid,
    TaskFormUnavailable,
    WrongTaskKind,
)
from django_openworkflow.models import Approval, Signal, StepAttempt
from tests.conftest import files_in, is_parked, race
from tests.fixtures.testapp.forms import RefundForm
from tests.fixtures.testapp.models import Order
from tests.fixtures.testapp.workflows import refund, refund_details

pytestmark = pytest.mark.django_db(transaction=True)

FORMS = "tests.fixtures.testapp.forms"


def _user(django_user_model: Any, name: str, *groups: str) -> Any:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    return user


def _opened(run_worker: Any, inp: dict[str, Any] | None = None, workflow: Any = refund_details) -> tuple[Any, Approval]:
    """A run parked on its task (run by an in-process worker)."""
    handle = workflow.run(inp or {})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def _nothing_delivered(handle: Any, approval: Approval) -> None:
    approval.refresh_from_db()
    assert approval.status == "open" and not Signal.objects.exists() and not LogEntry.objects.exists()
    assert StepAttempt.objects.get(workflow_run_id=handle.id, step_name="details").status == "running"


def test_a_manager_submits_the_form_and_the_run_gets_its_cleaned_data_as_exact_json(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    order = Order.objects.create(reference="A-7")
    handle, task = _opened(run_worker, {"initial": {"amount": "12.50", "order": order.pk}, "due": "30m"})
    assert (task.form, task.status) == (f"{FORMS}.RefundForm", "open")
    assert task.initial == {"amount": "12.50", "order": order.pk}
    assert task.form_fields == {
        "amount": "django.forms.fields.DecimalField",
        "reason": "django.forms.fields.ChoiceField",
        "order": "django.forms.models.ModelChoiceField",
        "refund_on": "django.forms.fields.DateField",
        "note": "django.forms.fields.CharField",
    }
    assert timedelta(minutes=29) < task.due_at - task.created_at <= timedelta(minutes=30)
    assert [found.id for found in approvals_for(ada)] == [task.id]
    _, form = open_task(task.id, ada)
    assert form.initial == {"amount": "12.50", "order": order.pk} and not form.is_bound
    data = {"amount": "12.50", "reason": "damaged", "order": str(order.pk), "refund_on": "2026-12-01"}
    submitted = submit_task(task.id, ada, data)
    expected = {"amount": "12.50", "reason": "damaged", "order": order.pk, "refund_on": "2026-12-01", "note": ""}
    assert (submitted["data"], submitted["by"]) == (expected, "ada")
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"data": expected, "by": "ada", "at": submitted["at"]}
    task.refresh_from_db()
    assert (task.status, task.decided_by) == ("submitted", "ada")
    wait = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="details")
    assert wait.output["data"] == submitted and wait.context["form"] == f"{FORMS}.RefundForm"
    entry = LogEntry.objects.get()
    assert (entry.user_id, entry.object_id, entry.change_message) == (
        ada.pk, str(handle.id), "Submitted 'details' (django-openworkflow)"
    )  # fmt: skip
    assert approvals_for(ada) == []
    with pytest.raises(ApprovalClosed, match="task .* was already submitted by ada at "):
        submit_task(task.id, ada, data)


def test_an_invalid_submission_delivers_nothing_and_carries_the_forms_errors(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    order = Order.objects.create(reference="A-7")
    handle, task = _opened(run_worker)
    bad = {"amount": "-3", "reason": "other", "order": str(order.pk), "refund_on": "someday"}
    with pytest.raises(TaskFormInvalid) as refused:
        submit_task(task.id, ada, bad)
    errors = refused.value.errors
    assert set(errors) == {"amount", "refund_on", "__all__"}
    assert errors["__all__"] == ["Say why in the note when the reason is 'other'."]  # the form's own clean()
    assert "greater than or equal to 0.01" in errors["amount"][0] and "valid date" in errors["refund_on"][0]
    assert refused.value.form.is_bound and "amount" in str(refused.value)
    # A dict (JSON) names only the form's fields, and gives a field of one value one value.
    shapes = {"amount": ["1", "2"], "reason": {"x": 1}, "order": str(order.pk), "refund_on": "2026-12-01", "nope": 1}
    with pytest.raises(TaskFormInvalid) as refused:
        submit_task(task.id, ada, shapes)
    assert refused.value.errors["amount"] == ["Enter a single value, not a list."]
    assert refused.value.errors["reason"] == ["Enter a value, not an object."]
    assert refused.value.errors["nope"][0].startswith("unknown field 'nope'; the form's fields are amount, reason")
    _nothing_delivered(handle, task)


def test_the_unassigned_see_nothing_and_are_refused_and_each_kind_takes_its_own_answer(run_worker, django_user_model):
    eve = _user(django_user_model, "eve", "interns")
    ada = _user(django_user_model, "ada", "managers")
    handle, task = _opened(run_worker)
    assert approvals_for(eve) == []
    with pytest.raises(ApprovalNotAssigned, match="eve may not decide task"):
        submit_task(task.id, eve, {"note": "x"})
    with pytest.raises(ApprovalNotAssigned):
        open_task(task.id, eve)
    with pytest.raises(WrongTaskKind, match="asks for a form"):
        decide_approval(task.id, ada, approved=True)
    _nothing_delivered(handle, task)
    approval = _opened(run_worker, {"amount": 5}, workflow=refund)[1]
    with pytest.raises(WrongTaskKind, match="takes a yes/no decision"):
        submit_task(approval.id, ada, {})


def test_two_people_submitting_at_once_deliver_one(run_worker, django_user_model):
    users = [_user(django_user_model, f"m{i}", "managers") for i in range(4)]
    orders = [Order.objects.create(reference=f"R-{i}") for i in range(4)]
    handle, task = _opened(run_worker)
    ids = iter(range(4))

    def submit() -> Any:
        n = next(ids)  # next() on one iterator from four threads: the GIL hands each its own
        data = {"amount": "1", "reason": "late", "order": str(orders[n].pk), "refund_on": "2026-12-01"}
        try:
            return submit_task(task.id, users[n], data)
        except ApprovalClosed as exc:
            return exc

    results = race(submit, n=4)
    won = [r for r in results if isinstance(r, dict)]
    told = [r for r in results if isinstance(r, ApprovalClosed)]
    assert len(won) == 1 and len(told) == 3
    assert {exc.decided_by for exc in told} == {won[0]["by"]}
    assert Signal.objects.count() == 1 and LogEntry.objects.count() == 1
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["data"] == won[0]["data"] and handle.result()["by"] == won[0]["by"]


def test_of_four_people_submitting_files_at_once_only_the_winners_file_is_left(
    run_worker, django_user_model, task_files_dir
):
    users = [_user(django_user_model, f"m{i}", "managers") for i in range(4)]
    handle, task = _opened(run_worker, {"form": f"{FORMS}.ReceiptForm"})
    ids = iter(range(4))

    def submit() -> Any:
        n = next(ids)  # next() on one iterator from four threads: the GIL hands each its own
        receipt = SimpleUploadedFile(f"receipt-{n}.txt", f"paid by m{n}".encode(), "text/plain")
        try:
            return submit_task(task.id, users[n], {"note": f"from m{n}", "receipt": receipt})
        except ApprovalClosed as exc:
            return exc

    results = race(submit, n=4)
    [won] = [r for r in results if isinstance(r, dict)]
    assert sum(isinstance(r, ApprovalClosed) for r in results) == 3
    receipt = won["data"]["receipt"]
    # The losers wrote their files once their forms were valid, and deleted them when the delivery refused them.
    assert files_in(task_files_dir) == [receipt["path"]]
    assert receipt["path"].startswith(f"openworkflow/task-files/{handle.id}/")
    assert (task_files_dir / receipt["path"]).read_text() == f"paid by {won['by']}"
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["data"]["receipt"] == receipt


def test_a_form_that_no_longer_imports_or_whose_fields_changed_is_refused_and_nothing_is_delivered(
    run_worker, django_user_model
):
    ada = _user(django_user_model, "ada", "managers")
    handle, task = _opened(run_worker, {"form": f"{FORMS}.NoteForm"})
    assert task.form_fields == {"note": "django.forms.fields.CharField"}
    Approval.objects.filter(id=task.id).update(form=f"{FORMS}.GoneForm")  # renamed in a deploy since
    with pytest.raises(TaskFormUnavailable, match="GoneForm' does not import"):
        submit_task(task.id, ada, {"note": "hi"})
    # The field was an IntegerField when the task opened: the workflow waits for a number.
    Approval.objects.filter(id=task.id).update(
        form=f"{FORMS}.NoteForm", form_fields={"note": "django.forms.fields.IntegerField"}
    )
    with pytest.raises(TaskFormUnavailable, match="'note' was a IntegerField and is now a CharField"):
        submit_task(task.id, ada, {"note": "hi"})
    Approval.objects.filter(id=task.id).update(form_fields={"note": "django.forms.fields.CharField", "gone": "x.Y"})
    with pytest.raises(TaskFormUnavailable, match="'gone' is gone"):
        open_task(task.id, ada)
    _nothing_delivered(handle, task)
    Approval.objects.filter(id=task.id).update(form_fields={})  # a field added since is fine
    assert submit_task(task.id, ada, {"note": "hi"})["data"] == {"note": "hi"}


def test_several_values_times_to_the_microsecond_and_a_timeout(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle, task = _opened(run_worker, {"form": f"{FORMS}.TagsForm", "initial": {"tags": ["a"]}})
    data = {"tags": ["c", "a"], "at": "2026-12-01T10:11:12.345678+01:00", "urgent": True}
    submitted = submit_task(task.id, ada, data)
    assert submitted["data"] == {"tags": ["c", "a"], "at": "2026-12-01T10:11:12.345678+01:00", "urgent": True}
    run_worker(until=lambda: handle.status() == "completed")
    expired, task = _opened(run_worker, {"timeout": "1s", "form": f"{FORMS}.NoteForm"})
    run_worker(until=lambda: expired.status() == "completed")
    assert expired.result() == {"timed_out": True}
    task.refresh_from_db()
    assert task.status == "timed_out" and approvals_for(ada) == []
    with pytest.raises(ApprovalClosed, match="timed out"):
        submit_task(task.id, ada, {"note": "late"})


@pytest.mark.parametrize(
    ("inp", "message"),
    [
        ({"form": f"{FORMS}.NoSuchForm"}, "does not import"),
        ({"form": "tests.fixtures.testapp.models.Order"}, "is not a Django Form class"),
        ({"form": "RefundForm"}, "its dotted path"),
        ({"due": "2h"}, "due after it times out"),
        ({"assignees": ["managers"]}, "is not 'user:"),
    ],
)
def test_a_task_that_cannot_open_fails_its_run_naming_why(run_worker, inp, message):
    handle = refund_details.run(inp)
    run_worker(until=lambda: handle.status() == "failed")
    assert message in handle.fetch().error["message"] and not Approval.objects.exists()


@workflow(name="test-task-local-form")
def local_form(ctx):
    from django import forms

    class Local(forms.Form):  # not importable by its path, as the web server would need
        note = forms.CharField()

    return ctx.wait_for_input("details", form=Local, assignees="user:ada")


@workflow(name="test-task-nan-initial")
def nan_initial(ctx):
    return ctx.wait_for_input("details", form=RefundForm, assignees="user:ada", initial={"amount": float("nan")})


def test_a_form_class_that_does_not_import_by_its_path_or_an_initial_json_cannot_hold_fails_the_run(run_worker):
    handles = [local_form.run(), nan_initial.run()]
    run_worker(until=lambda: all(handle.status() == "failed" for handle in handles))
    local, nan = (handle.fetch().error["message"] for handle in handles)
    assert "Local does not import as 'tests.engine.test_human_tasks.local_form.<locals>.Local'" in local
    assert "top level of a module" in local
    assert "initial of task 'details'" in nan and not Approval.objects.exists()


@workflow(name="test-async-task")
async def async_task(ctx):
    submitted = await ctx.wait_for_input("details", form=f"{FORMS}.NoteForm", assignees="group:managers")
    decision = await ctx.wait_for_approval("ok", assignees="group:managers")
    return {"note": submitted.data["note"], "by": submitted.by, "approved": decision.approved}


def test_an_async_workflow_awaits_its_task_and_its_approval(run_worker, django_user_model):
    ada = _user(django_user_model, "ada", "managers")
    handle, task = _opened(run_worker, workflow=async_task)
    submit_task(task.id, ada, {"note": "fine"})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(name="ok").exists())
    decide_approval(Approval.objects.get(name="ok").id, ada, approved=True)
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == {"note": "fine", "by": "ada", "approved": True}


def test_erasure_and_retention_delete_the_files_a_runs_tasks_took(run_worker, django_user_model, task_files_dir):
    from django_openworkflow.store import get_backend
    from django_openworkflow.store.erasure import Outcome, erase_run
    from django_openworkflow.worker.prune import prune

    ada = _user(django_user_model, "ada", "managers")
    runs = []
    for n in range(2):
        handle, task = _opened(run_worker, {"form": f"{FORMS}.ReceiptForm"})
        receipt = SimpleUploadedFile(f"r{n}.txt", b"paid", "text/plain")
        submitted = submit_task(task.id, ada, {"note": "paid", "receipt": receipt, "photo": None})
        run_worker(until=lambda handle=handle: handle.status() == "completed")
        runs.append((handle, submitted["data"]["receipt"]["path"]))
    (kept, kept_path), (erased, _) = runs
    assert erase_run(get_backend(), erased.id, by="test") == Outcome.ERASED
    assert files_in(task_files_dir) == [kept_path]  # only the erased run's directory went, once committed
    assert sum(prune(older_than=timedelta(0)).runs.values()) == 2
    assert files_in(task_files_dir) == []
