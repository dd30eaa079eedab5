"""The API's tasks: a task's form published as JSON Schema, submitted, refused with the form's errors (400)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.test import Client, override_settings

from django_openworkflow.models import ApiToken, Approval, Signal
from tests.conftest import files_in, is_parked
from tests.fixtures.testapp.models import Order
from tests.fixtures.testapp.workflows import refund, refund_details

pytestmark = pytest.mark.django_db(transaction=True)

API = "/workflows/api"


def _token(django_user_model: Any, name: str, *groups: str) -> Client:
    user = django_user_model.objects.create_user(name, password="pw")
    for group in groups:
        user.groups.add(Group.objects.get_or_create(name=group)[0])
    _, token = ApiToken.objects.create_token(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


def _post(client: Client, url: str, body: Any) -> Any:
    return client.post(f"{API}{url}", json.dumps(body), content_type="application/json")


@pytest.fixture
def task(run_worker: Any) -> tuple[Any, Approval]:
    handle = refund_details.run({"order": 42, "initial": {"amount": "12.50"}})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    return handle, Approval.objects.get(workflow_run_id=handle.id)


def test_the_list_publishes_the_forms_fields_as_json_schema(task, django_user_model):
    _, approval = task
    [listed] = _token(django_user_model, "ada", "managers").get(f"{API}/approvals").json()["approvals"]
    assert (listed["id"], listed["kind"], listed["form_error"], listed["due_at"]) == (approval.id, "input", None, None)
    form = listed["form"]
    assert form["type"] == "object" and form["additionalProperties"] is False
    assert form["required"] == ["amount", "reason", "order", "refund_on"]
    fields = form["properties"]
    assert fields["amount"] == {
        "type": ["string", "number"],
        "minimum": 0.01,
        "description": 'a decimal number, exact as a string ("12.50"): at most 8 digits, 2 after the point',
        "title": "Amount (EUR)",
        "default": "12.50",
    }
    assert fields["reason"] == {"enum": ["damaged", "late", "other"], "title": "Reason"}
    assert fields["order"]["type"] == "integer" and "(testapp.Order)" in fields["order"]["description"]
    assert fields["refund_on"] == {
        "type": "string", "format": "date", "title": "Refund on", "description": "the day the money leaves"
    }  # fmt: skip
    assert fields["note"] == {"type": "string", "maxLength": 200, "title": "Note"}


def test_submit_refuses_with_the_forms_errors_then_delivers_once(task, django_user_model, run_worker):
    handle, approval = task
    ada, eve = _token(django_user_model, "ada", "managers"), _token(django_user_model, "eve")
    url = f"/approvals/{approval.id}/submit"
    order = Order.objects.create(reference="A-7")
    good = {"amount": 9.5, "reason": "late", "order": order.pk, "refund_on": "2026-12-01"}
    refused = _post(eve, url, {"data": good})
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "not_assigned")
    invalid = _post(ada, url, {"data": {**good, "amount": "abc", "reason": "other", "extra": 1}})
    error = invalid.json()["error"]
    assert invalid.status_code == 400 and error["code"] == "invalid_form" and error["field"] == "data.amount"
    assert error["errors"]["amount"] == ["Enter a number."]
    assert error["errors"]["__all__"] == ["Say why in the note when the reason is 'other'."]
    assert error["errors"]["extra"][0].startswith("unknown field 'extra'")
    assert _post(ada, url, {"data": [1]}).json()["error"] == {
        "code": "invalid", "message": "data must be an object of the form's fields, not an array", "field": "data"
    }  # fmt: skip
    assert _post(ada, url, {"form": {}}).json()["error"]["code"] == "unknown_field"
    assert not Signal.objects.exists() and Approval.objects.get().status == "open"
    done = _post(ada, url, {"data": good})
    assert done.status_code == 200
    submission = done.json()["submission"]
    assert submission["data"] == {**good, "amount": "9.5", "note": ""} and submission["by"] == "ada"
    second = _post(_token(django_user_model, "bob", "managers"), url, {"data": good})
    assert (second.status_code, second.json()["error"]["code"]) == (409, "already_decided")
    assert f"task {approval.id} was already submitted by ada at " in second.json()["error"]["message"]
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["data"] == submission["data"] and Signal.objects.count() == 1


def test_a_form_gone_is_published_as_such_and_refused_and_each_kind_keeps_its_endpoint(
    task, django_user_model, run_worker
):
    _, approval = task
    Approval.objects.filter(id=approval.id).update(form="tests.fixtures.testapp.forms.GoneForm")
    ada = _token(django_user_model, "ada", "managers")
    [listed] = ada.get(f"{API}/approvals").json()["approvals"]
    assert listed["form"] is None and "GoneForm' does not import" in listed["form_error"]
    gone = _post(ada, f"/approvals/{approval.id}/submit", {"data": {}})
    assert (gone.status_code, gone.json()["error"]["code"]) == (409, "form_unavailable")
    wrong = _post(ada, f"/approvals/{approval.id}/decide", {"approved": True})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "wrong_kind")
    handle = refund.run({"amount": 5})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    decision = Approval.objects.get(workflow_run_id=handle.id)
    listed = {row["id"]: row for row in ada.get(f"{API}/approvals").json()["approvals"]}
    assert (listed[decision.id]["kind"], listed[decision.id]["form"]) == ("decision", None)
    wrong = _post(ada, f"/approvals/{decision.id}/submit", {"data": {}})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "wrong_kind")
    assert _post(ada, "/approvals/999999/submit", {"data": {}}).status_code == 404
    assert not Signal.objects.exists()


RECEIPT_FORM = "tests.fixtures.testapp.forms.ReceiptForm"


def _file(name: str, content: bytes, **more: Any) -> dict[str, Any]:
    return {"name": name, "content_base64": base64.b64encode(content).decode("ascii"), **more}


def test_a_file_field_is_published_as_an_object_of_its_name_and_base64_content(run_worker, django_user_model):
    handle = refund_details.run({"form": RECEIPT_FORM})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    [listed] = _token(django_user_model, "ada", "managers").get(f"{API}/approvals").json()["approvals"]
    form = listed["form"]
    assert form["required"] == ["note", "receipt"]
    receipt = form["properties"]["receipt"]
    assert receipt["type"] == "object" and receipt["required"] == ["name", "content_base64"]
    assert receipt["additionalProperties"] is False and set(receipt["properties"]) == {
        "name", "content_base64", "content_type"
    }  # fmt: skip
    assert receipt["properties"]["name"]["maxLength"] == 60  # the field's max_length
    assert receipt["properties"]["content_base64"] == {"type": "string", "contentEncoding": "base64"}
    assert receipt["description"].startswith(f"a file, of at most {10 * 1024 * 1024} bytes, its content in base64")
    assert form["properties"]["photo"]["description"].startswith("an image")


def test_submit_takes_files_as_base64_refuses_bad_ones_naming_the_field_and_writes_only_the_delivered(
    run_worker, django_user_model, task_files_dir
):
    handle = refund_details.run({"form": RECEIPT_FORM})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    approval = Approval.objects.get(workflow_run_id=handle.id)
    ada, bob = _token(django_user_model, "ada", "managers"), _token(django_user_model, "bob", "managers")
    url = f"/approvals/{approval.id}/submit"
    bad = {
        "not base64": ({"name": "r.pdf", "content_base64": "%%%"}, "The file's content_base64 is not base64."),
        "a string": ("cmVjZWlwdA==", 'Send a file as an object {"name": ..., "content_base64": ...}.'),
        "no name": ({"content_base64": "cmVjZWlwdA=="}, "A file needs its name, as text."),
        "an unknown key": ({**_file("r.pdf", b"x"), "size": 1}, "Unknown key 'size' in a file"),
        "a name too long": (_file("r" * 61 + ".pdf", b"x"), "Ensure this filename has at most 60 characters"),
    }
    for what, (receipt, message) in bad.items():
        answer = _post(ada, url, {"data": {"note": "paid", "receipt": receipt}})
        error = answer.json()["error"]
        assert (answer.status_code, error["code"], error["field"]) == (400, "invalid_form", "data.receipt"), what
        assert error["errors"]["receipt"][0].startswith(message), what
    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "TASK_FILE_MAX_BYTES": 4}):
        answer = _post(ada, url, {"data": {"note": "paid", "receipt": _file("r.pdf", b"12345")}})
    error = answer.json()["error"]
    assert (answer.status_code, error["field"]) == (400, "data.receipt")
    assert error["errors"]["receipt"] == ["The file is 5 bytes; the most a task takes is 4."]
    refused = _post(ada, url, {"data": {"note": "refuse", "receipt": _file("r.pdf", b"%PDF")}})  # the form's rule
    assert refused.json()["error"]["errors"] == {"note": ["The note says to refuse."]}
    note = _post(ada, url, {"data": {"note": _file("r.pdf", b"%PDF"), "receipt": _file("r.pdf", b"%PDF")}})
    assert note.json()["error"]["errors"]["note"] == ["Enter a value, not an object."]
    assert files_in(task_files_dir) == [] and not Signal.objects.exists()

    sent = _post(ada, url, {"data": {"note": "paid", "receipt": _file("receipt.pdf", b"%PDF-1.4 paid")}})
    assert sent.status_code == 200, sent.content
    reference = sent.json()["submission"]["data"]["receipt"]
    assert reference == {
        "name": "receipt.pdf",
        "path": reference["path"],
        "storage": "default",
        "size": 13,
        "content_type": "application/pdf",  # guessed from the name
    }
    assert files_in(task_files_dir) == [reference["path"]]
    assert (task_files_dir / reference["path"]).read_bytes() == b"%PDF-1.4 paid"
    # Bob comes second: 409, refused before his form is read, and no file of his is written.
    late = _post(bob, url, {"data": {"note": "also", "receipt": _file("late.txt", b"late", content_type="text/x")}})
    assert (late.status_code, late.json()["error"]["code"]) == (409, "already_decided")
    assert files_in(task_files_dir) == [reference["path"]]
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result()["data"] == {"note": "paid", "receipt": reference, "photo": None}


def test_a_submission_may_be_larger_than_a_payload_by_its_files_and_no_more(
    run_worker, django_user_model, task_files_dir
):
    handle = refund_details.run({"form": RECEIPT_FORM})
    run_worker(until=lambda: is_parked(handle) and Approval.objects.filter(workflow_run_id=handle.id).exists())
    url = f"/approvals/{Approval.objects.get(workflow_run_id=handle.id).id}/submit"
    ada = _token(django_user_model, "ada", "managers")
    big = bytes(range(256)) * 400  # 102400 bytes: in base64, more than a payload (1000) and the body's overhead
    limits = {**settings.OPENWORKFLOW, "MAX_PAYLOAD_BYTES": 1000, "TASK_FILE_MAX_BYTES": len(big)}
    with override_settings(OPENWORKFLOW=limits):
        too_big = _post(ada, url, {"data": {"note": "paid", "receipt": _file("r.bin", big + b"xxxx")}})
        assert (too_big.status_code, too_big.json()["error"]["field"]) == (400, "data.receipt")
        body = _post(ada, url, {"data": {"note": "paid", "receipt": _file("r.bin", big * 3)}})  # > 2 files: 413
        assert (body.status_code, body.json()["error"]["code"]) == (413, "too_large"), body.content[:300]
        assert files_in(task_files_dir) == []
    with override_settings(OPENWORKFLOW={**limits, "TASK_FILE_MAX_BYTES": None}):  # no limit of ours: Django's
        sent = _post(ada, url, {"data": {"note": "paid", "receipt": _file("r.bin", big * 3)}})
    assert sent.status_code == 200, sent.content
    [path] = files_in(task_files_dir)
    assert (task_files_dir / path).read_bytes() == big * 3
