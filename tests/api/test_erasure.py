"""``POST api/forget`` (api/erasure.py): the permission, a refusal naming the live run, the erasure."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_openworkflow.models import WorkflowRun
from tests.api.test_views import make_user
from tests.client.test_erasure import FORGET, child, waits
from tests.conftest import is_parked
from tests.fixtures.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/workflows/api/forget"


def test_forget_through_the_api(run_worker: Any, django_user_model: Any) -> None:
    order = Order.objects.create(reference="api")
    finished = child.run({"secret": FORGET}, subject=order)
    live = waits.run({}, subject=order)
    run_worker(until=lambda: finished.status() == "completed" and is_parked(live))
    body = {"subject": f"testapp.order:{order.pk}"}

    def client(*actions: str) -> Client:
        found = Client()
        found.force_login(make_user(django_user_model, *actions, name="-".join(("u", *actions))))
        return found

    denied = client("view", "change").post(URL, body, content_type="application/json")
    assert denied.status_code == 403 and "delete_workflowrun" in denied.json()["error"]["message"]
    allowed = client("delete")
    refused = allowed.post(URL, body, content_type="application/json")
    assert refused.status_code == 409 and str(live.id) in refused.json()["error"]["message"]
    assert not WorkflowRun.objects.filter(erased_at__isnull=False).exists()
    wrong = allowed.post(URL, {**body, "cancel_live": "yes"}, content_type="application/json")
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "cancel_live"
    missing = allowed.post(URL, {"subject": "testapp.order:999999"}, content_type="application/json")
    assert missing.status_code == 200 and missing.json()["erased"] == []  # a deleted object's runs: none here

    done = allowed.post(URL, {**body, "cancel_live": True}, content_type="application/json")
    assert done.status_code == 200, done.content
    assert done.json() == {
        "subject": body["subject"],
        "erased": [str(finished.id), str(live.id)],
        "already": [],
        "canceled": [str(live.id)],
    }
    assert WorkflowRun.objects.get(id=finished.id).erased_by == "u-delete"
