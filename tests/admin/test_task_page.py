"""A task's page in the Inbox: the project's form rendered with its widgets, refused with its errors, delivered once."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group
from django.test import Client

from django_openworkflow.models import Approval, Signal
from tests.admin.test_i18n import left_in_english, localized  # noqa: F401  (a fixture)
from tests.conftest import files_in, is_parked
from tests.fixtures.testapp.models import Order
from tests.fixtures.testapp.workflows import refund_details

pytestmark = pytest.mark.django_db(transaction=True)

INBOX = "/admin/django_openworkflow/approval/"


def _login(django_user_model: Any, name: str, *groups: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def task(run_worker: Any) -> tuple[Any, Approval]:
    handle = refund_details.run({"order": 42, "initial": {"amount": "12.50"}, "due": "30m"})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_the_inbox_links_to_the_task_whose_page_renders_the_form_with_its_widgets(task, django_user_model):
    handle, approval = task
    ada = _login(django_user_model, "ada", "managers")
    inbox = ada.get(INBOX).content.decode()
    url = f"{INBOX}{approval.id}/submit/"
    assert f'href="{url}"' in inbox and "Fill in the form" in inbox and "Refund for order 42" in inbox
    assert "due " in inbox and 'name="decision"' not in inbox  # no Approve / Reject for a task
    order = Order.objects.create(reference="A-7")
    page = ada.get(url)
    text = page.content.decode()
    assert page.status_code == 200 and str(handle.id) in text and "Refund for order 42" in text
    assert 'name="amount" value="12.50"' in text and 'step="0.01"' in text  # the initial value, a NumberInput
    assert '<select name="reason"' in text and '<option value="late">Late</option>' in text
    assert f'<option value="{order.pk}">Order A-7</option>' in text  # the model choice's queryset
    assert 'type="date"' not in text and 'name="refund_on"' in text and "the day the money leaves" in text
    assert "Amount (EUR)" in text and 'value="Submit"' in text


def test_an_invalid_submission_shows_the_forms_errors_and_writes_nothing_then_a_valid_one_delivers(
    task, django_user_model, run_worker
):
    handle, approval = task
    ada = _login(django_user_model, "ada", "managers")
    url = f"{INBOX}{approval.id}/submit/"
    order = Order.objects.create(reference="A-7")
    refused = ada.post(url, {"amount": "0", "reason": "other", "order": order.pk, "refund_on": "2026-12-01"})
    text = refused.content.decode()
    assert refused.status_code == 200 and 'class="errorlist' in text
    assert "greater than or equal to 0.01" in text and "Say why in the note when the reason is" in text
    assert 'name="amount" value="0"' in text  # what the person typed stays
    approval.refresh_from_db()
    assert approval.status == "open" and not Signal.objects.exists() and not LogEntry.objects.exists()
    sent = {"amount": "7", "reason": "other", "note": "wrong size", "order": order.pk, "refund_on": "2026-12-01"}
    answer = ada.post(url, sent, follow=True)
    assert answer.redirect_chain == [(INBOX, 302)] and "Submitted." in answer.content.decode()
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["data"] == {
        "amount": "7", "reason": "other", "order": order.pk, "refund_on": "2026-12-01", "note": "wrong size"
    }  # fmt: skip
    again = _login(django_user_model, "bob", "managers").post(url, sent, follow=True).content.decode()
    assert "This task was already submitted by ada: the first submission counts." in again
    assert Signal.objects.count() == 1


def test_an_outsider_gets_403_and_a_form_gone_is_said_on_the_page(task, django_user_model):
    _, approval = task
    url = f"{INBOX}{approval.id}/submit/"
    eve = _login(django_user_model, "eve", "interns")
    assert "Refund for order 42" not in eve.get(INBOX).content.decode()
    assert eve.get(url).status_code == 403 and eve.post(url, {"note": "x"}).status_code == 403
    assert _login(django_user_model, "ada", "managers").get(f"{INBOX}999999/submit/").status_code == 404
    Approval.objects.filter(id=approval.id).update(form="tests.fixtures.testapp.forms.GoneForm")
    ada = Client()
    ada.force_login(django_user_model.objects.get(username="ada"))
    page = ada.post(url, {"note": "x"}).content.decode()
    assert "GoneForm&#x27; does not import" in page and 'value="Submit"' not in page
    assert Approval.objects.get().status == "open" and not Signal.objects.exists()


def test_the_task_page_in_french_leaves_no_english(task, django_user_model, localized):  # noqa: F811
    _, approval = task
    client = _login(django_user_model, "ada", "managers")
    # The form's labels, help texts and choices, the task's name and details are the project's data.
    ours = ("refund", "amount", "reason", "order", "note", "damaged", "late", "other", "money", "details")
    left = [
        text
        for text in left_in_english(client, f"{INBOX}{approval.id}/submit/")
        if not any(word in text.lower() for word in ours) and text != "ada"
    ]
    assert left == [], left


def test_a_form_with_files_is_posted_multipart_and_the_run_receives_a_reference_to_the_saved_file(
    run_worker, django_user_model, task_files_dir
):
    handle = refund_details.run({"form": "tests.fixtures.testapp.forms.ReceiptForm"})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    approval = Approval.objects.get(workflow_run_id=handle.id)
    ada = _login(django_user_model, "ada", "managers")
    url = f"{INBOX}{approval.id}/submit/"
    page = ada.get(url).content.decode()
    assert 'enctype="multipart/form-data"' in page and 'type="file" name="receipt"' in page
    # The form refuses (its note's rule, a photo that is no image): its errors, and no file written.
    refused = ada.post(
        url,
        {"note": "refuse", "receipt": _upload("receipt.pdf", b"%PDF-1.4 paid"), "photo": _upload("cat.png", b"no")},
    )
    text = refused.content.decode()
    assert refused.status_code == 200 and "The note says to refuse." in text and "Upload a valid image" in text
    assert files_in(task_files_dir) == [] and not Signal.objects.exists()
    answer = ada.post(url, {"note": "paid", "receipt": _upload("receipt.pdf", b"%PDF-1.4 paid")}, follow=True)
    assert answer.redirect_chain == [(INBOX, 302)] and "Submitted." in answer.content.decode()
    run_worker(until=lambda: handle.status() == "completed")
    data = handle.result()["data"]
    [path] = files_in(task_files_dir)
    assert data == {
        "note": "paid",
        "receipt": {
            "name": "receipt.pdf",
            "path": path,
            "storage": "default",
            "size": 13,
            "content_type": "application/pdf",
        },
        "photo": None,
    }
    assert path.startswith(f"openworkflow/task-files/{handle.id}/") and path.endswith("/receipt.pdf")
    assert (task_files_dir / path).read_bytes() == b"%PDF-1.4 paid"
    # A second submission is refused before its form is read: its file is never written.
    again = _login(django_user_model, "bob", "managers")
    late = again.post(url, {"note": "also", "receipt": _upload("late.pdf", b"%PDF late")}, follow=True)
    assert "This task was already submitted by ada" in late.content.decode()
    assert files_in(task_files_dir) == [path]


def _upload(name: str, content: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, content, "application/pdf" if name.endswith(".pdf") else "image/png")
