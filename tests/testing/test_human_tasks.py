"""``testing.decide`` and ``testing.submit_task``: a test drives approvals and tasks without the admin.

On the workflow database, inside the test's transaction (with ``drain()``),
and on the in-memory backend, with no database at all (no ``django_db``
mark there: a query would fail the test).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.files.storage import FileSystemStorage, default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import QueryDict
from django.test import override_settings
from django.utils.datastructures import MultiValueDict

from django_openworkflow.client.human_tasks import submit_task as submit_files
from django_openworkflow.errors import (
    ApprovalClosed,
    ApprovalNotAssigned,
    ApprovalNotFound,
    InvalidArgument,
    TaskFormInvalid,
)
from django_openworkflow.models import Approval
from django_openworkflow.testing import advance, decide, drain, submit_task
from django_openworkflow.testing.memory import InMemoryBackend, start
from django_openworkflow.testing.memory import drain as drain_memory
from django_openworkflow.testing.overrides import override_openworkflow
from tests.conftest import files_in
from tests.engine.test_human_tasks import async_task
from tests.fixtures.testapp.models import Order
from tests.fixtures.testapp.workflows import refund, refund_details

NOTE_FORM = "tests.fixtures.testapp.forms.NoteForm"


@pytest.mark.django_db
def test_a_test_decides_and_submits_on_the_database_as_a_person_would():
    ada = User.objects.create_user("ada")
    ada.groups.add(Group.objects.create(name="managers"))
    User.objects.create_user("eve")
    approval, task = refund.run({"amount": 5}), refund_details.run({"order": 7})
    with pytest.raises(ApprovalNotFound, match="has no open approval: a run opens it when it reaches the wait"):
        decide(approval, approved=True, by="ada")
    drain()
    with pytest.raises(ApprovalNotAssigned):
        decide(approval, approved=True, by="eve")
    decision = decide(approval, approved=False, by="ada", comment="too much")
    assert (decision["approved"], decision["by"], decision["comment"]) == (False, "ada", "too much")
    order = Order.objects.create(reference="A-7")
    with pytest.raises(TaskFormInvalid) as refused:
        submit_task(task, {"amount": "1", "reason": "late"}, by=ada)
    assert set(refused.value.errors) == {"order", "refund_on"}
    data = {"amount": "1.10", "reason": "late", "order": order.pk, "refund_on": "2026-12-01"}
    submitted = submit_task(task.id, data, by=ada, name="details")
    drain()
    assert approval.result()["comment"] == "too much" and task.result()["data"] == submitted["data"]
    assert submitted["data"]["amount"] == "1.10"
    with pytest.raises(ApprovalNotFound, match="no open task named 'details'"):
        submit_task(task, data, by=ada, name="details")
    with pytest.raises(ValueError, match="no user has the username 'nobody'"):
        decide(approval, approved=True, by="nobody")


@pytest.mark.django_db
def test_a_model_form_is_a_tasks_form_too():
    ada = User.objects.create_user("ada", is_superuser=True)
    handle = refund_details.run({"form": "tests.fixtures.testapp.forms.OrderForm", "initial": {"reference": "A-"}})
    drain()
    with pytest.raises(TaskFormInvalid, match="at most 40 characters"):
        submit_task(handle, {"reference": "x" * 41}, by=ada)
    submit_task(handle, {"reference": "A-9"}, by=ada)
    drain()
    assert handle.result()["data"] == {"reference": "A-9"} and not Order.objects.exists()


@pytest.mark.django_db
def test_advance_times_out_an_open_task_as_its_run_would_see_it():
    ada = User.objects.create_user("ada", is_superuser=True)
    handle = refund_details.run({"form": NOTE_FORM, "timeout": "1h", "due": "30m"})
    drain()
    advance("2h")  # the task's timeout is past: a submission now is refused, before any worker journals it
    with pytest.raises(ApprovalClosed, match="timed out"):
        submit_task(handle, {"note": "late"}, by=ada)
    drain()
    assert handle.result() == {"timed_out": True}


def test_on_the_memory_backend_without_a_database():
    backend = InMemoryBackend()
    ada = User(username="ada")  # never saved: an assignee by username needs no query
    root = User(username="root", is_superuser=True)
    approval = start(backend, refund, {"amount": 5, "assignees": ["user:ada"]})
    task = start(backend, refund_details, {"form": NOTE_FORM, "assignees": "user:ada"})
    both = start(backend, async_task)
    drain_memory(backend)
    assert decide(approval, approved=True, by=ada, store=backend)["by"] == "ada"
    with pytest.raises(TaskFormInvalid, match="note: This field is required"):
        submit_task(task, {}, by=ada, store=backend)
    submit_task(task, {"note": "hello"}, by=ada, store=backend)
    submit_task(both, {"note": "first"}, by=root, store=backend)
    drain_memory(backend)
    decide(both, approved=False, by=root, store=backend)
    drain_memory(backend)
    outcomes = [backend.run_outcome(run_id) for run_id in (approval, task, both)]
    assert [outcome.status for outcome in outcomes] == ["completed"] * 3
    assert outcomes[0].output["approved"] is True and outcomes[1].output["data"] == {"note": "hello"}
    assert outcomes[2].output == {"note": "first", "by": "root", "approved": False}
    [row] = [row for row in backend.approvals.values() if row.workflow_run_id == task]
    assert (row.status, row.decided_by) == ("submitted", "ada")


def test_claims_and_timers_on_the_memory_backend_without_a_database():
    from django_openworkflow.errors import TaskClaimed
    from django_openworkflow.testing import claim_task, fire_task_timers, reassign_task, release_task
    from django_openworkflow.testing.memory import Clock
    from django_openworkflow.testing.overrides import override_openworkflow

    clock = Clock()
    backend = InMemoryBackend(clock=clock)
    ada, bob = User(username="ada"), User(username="bob")  # never saved
    root = User(username="root", is_superuser=True)
    task = start(
        backend,
        refund_details,
        {
            "form": NOTE_FORM,
            "assignees": ["user:ada", "user:bob"],
            "timeout": "1d",
            "remind_every": "1h",
            "escalate_after": "2h",
            "escalate_to": "user:root",
        },
    )
    drain_memory(backend)
    assert claim_task(task, by=ada, store=backend).claimed_by == "ada"
    with pytest.raises(TaskClaimed, match="claimed by ada"):
        submit_task(task, {"note": "bob's"}, by=bob, store=backend)
    with pytest.raises(TaskClaimed, match="claimed by ada"):
        release_task(task, by=bob, store=backend)
    assert release_task(task, by=ada, store=backend).claimed_by == ""
    assert reassign_task(task, to=bob, by=root, store=backend).claimed_by == "bob"
    clock.advance("2h")
    with override_openworkflow(APPROVAL_NOTIFY=None):  # the default mails: it would read the users' table
        fired = fire_task_timers(store=backend)
        assert fire_task_timers(store=backend) == []
    assert sorted((timer.reason, str(timer.notify)) for timer in fired) == [
        ("escalation", str({"users": ["root"], "groups": [], "permissions": []})),
        ("reminder", str({"users": ["bob"]})),  # the holder alone
    ]
    submit_task(task, {"note": "bob's"}, by=bob, store=backend)
    drain_memory(backend)
    assert backend.run_outcome(task).output["by"] == "bob"
    [row] = [row for row in backend.approvals.values() if row.workflow_run_id == task]
    assert [entry["action"] for entry in row.activity] == [
        "claim",
        "release",
        "reassign",
        "escalate",
        "remind",
        "submit",
    ]
    assert row.assignees["users"] == ["ada", "bob", "root"]


RECEIPT_FORM = "tests.fixtures.testapp.forms.ReceiptForm"


@pytest.mark.django_db
def test_a_test_submits_a_file_and_the_run_receives_a_reference_an_invalid_form_writes_none(task_files_dir):
    ada = User.objects.create_user("ada", is_superuser=True)
    handle = refund_details.run({"form": RECEIPT_FORM})
    drain()
    receipt = SimpleUploadedFile("receipt.txt", b"paid in full", "text/plain")
    with pytest.raises(TaskFormInvalid) as refused:
        submit_task(handle, {"note": "refuse", "receipt": receipt}, by=ada)
    assert refused.value.errors == {"note": ["The note says to refuse."]}
    assert files_in(task_files_dir) == []
    with pytest.raises(TaskFormInvalid) as refused:  # larger than TASK_FILE_MAX_BYTES: the field's error
        with override_openworkflow(TASK_FILE_MAX_BYTES=5):
            submit_task(handle, {"note": "paid", "receipt": receipt}, by=ada)
    assert refused.value.errors == {"receipt": ["The file is 12 bytes; the most a task takes is 5."]}
    assert files_in(task_files_dir) == []
    with pytest.raises(TaskFormInvalid) as refused:  # a file where the form takes text
        submit_task(handle, {"note": receipt, "receipt": receipt}, by=ada)
    assert refused.value.errors == {"note": ["'note' is not a file field of the form; it takes no file."]}
    task_id = Approval.objects.get(workflow_run_id=handle.id).id
    with pytest.raises(TaskFormInvalid) as refused:  # as a browser posts them: the files apart
        submit_files(task_id, ada, QueryDict("note=paid"), files=MultiValueDict({"note": [receipt]}))
    assert refused.value.errors == {
        "note": ["'note' is not a file field of the form; it takes no file."],
        "receipt": ["This field is required."],
    }
    with pytest.raises(InvalidArgument, match="files must be a dict of the form's file fields, got list"):
        submit_files(task_id, ada, {"note": "paid"}, files=[receipt])
    assert files_in(task_files_dir) == []
    receipt.seek(0)
    submitted = submit_task(handle, {"note": "paid", "receipt": receipt}, by=ada)
    drain()
    reference = handle.result()["data"]["receipt"]
    assert reference == submitted["data"]["receipt"] and files_in(task_files_dir) == [reference["path"]]
    assert (reference["name"], reference["size"], reference["content_type"]) == ("receipt.txt", 12, "text/plain")
    with default_storage.open(reference["path"]) as saved:
        assert saved.read() == b"paid in full"


def test_a_file_on_the_memory_backend(task_files_dir):
    backend = InMemoryBackend()
    ada = User(username="ada")  # never saved
    task = start(backend, refund_details, {"form": RECEIPT_FORM, "assignees": "user:ada"})
    drain_memory(backend)
    with pytest.raises(TaskFormInvalid, match="receipt: This field is required"):
        submit_task(task, {"note": "paid"}, by=ada, store=backend)
    receipt = SimpleUploadedFile("r.txt", b"paid", "text/plain")
    submit_task(task, {"note": "paid", "receipt": receipt}, by=ada, store=backend)
    drain_memory(backend)
    reference = backend.run_outcome(task).output["data"]["receipt"]
    assert files_in(task_files_dir) == [reference["path"]] and reference["path"].startswith(
        f"openworkflow/task-files/{task}/"
    )
    assert (task_files_dir / reference["path"]).read_bytes() == b"paid"


class RefusingStorage(FileSystemStorage):
    """A file storage that fails to save images (a storage down half-way through a submission's files)."""

    def _save(self, name: str, content: Any) -> str:
        if name.endswith(".png"):
            raise OSError("the storage is full")
        return super()._save(name, content)


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (1, 1)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.django_db
def test_a_storage_failing_on_a_later_file_deletes_the_earlier_ones_and_delivers_nothing(task_files_dir):
    ada = User.objects.create_user("ada", is_superuser=True)
    handle = refund_details.run({"form": RECEIPT_FORM})
    drain()
    receipt = SimpleUploadedFile("receipt.txt", b"paid", "text/plain")
    photo = SimpleUploadedFile("photo.png", _png(), "image/png")
    refusing = {**settings.STORAGES, "default": {"BACKEND": f"{__name__}.RefusingStorage"}}
    with override_settings(STORAGES=refusing), pytest.raises(OSError, match="the storage is full"):
        submit_task(handle, {"note": "paid", "receipt": receipt, "photo": photo}, by=ada)
    assert files_in(task_files_dir) == []  # the receipt was saved first, then deleted
    assert Approval.objects.get(workflow_run_id=handle.id).status == "open"
