"""The admin's erasure by subject (admin/erasure.py): links, the confirmation page, the permission, the record."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client

from django_openworkflow.models import WorkflowRun
from tests.api.test_views import make_user
from tests.client.test_erasure import FORGET, child, waits
from tests.conftest import is_parked
from tests.fixtures.testapp.models import Order

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = "/admin/django_openworkflow/workflowrun/"


def test_forget_from_the_admin(run_worker: Any, admin_client: Client, django_user_model: Any) -> None:
    order = Order.objects.create(reference="admin")
    finished = child.run({"secret": FORGET}, subject=order)
    live = waits.run({}, subject=order)
    run_worker(until=lambda: finished.status() == "completed" and is_parked(live))
    subject = f"testapp.order:{order.pk}"
    page = f"{RUNS}forget/?subject={subject}"

    # Only users with the delete permission on runs see the way in, or the page.
    viewer = Client()
    viewer.force_login(make_user(django_user_model, "view", "change", name="viewer"))
    assert "forget/" not in viewer.get(f"{RUNS}?subject={subject}").text
    assert viewer.get(page).status_code == 403 and viewer.post(page).status_code == 403
    assert f"forget/?subject={subject.replace(':', '%3A')}" in admin_client.get(f"{RUNS}?subject={subject}").text
    assert "forget/?subject=" in admin_client.get(f"/shop-admin/testapp/order/{order.pk}/change/").text

    bad = admin_client.get(f"{RUNS}forget/?subject=shop.nothing:1", follow=True)
    assert bad.redirect_chain[-1][0] == RUNS and "is no installed model" in bad.text
    shown = admin_client.get(page)
    assert shown.status_code == 200 and str(live.id) in shown.text and "Cancel them first" in shown.text
    refused = admin_client.post(page, follow=True)
    assert str(live.id) in refused.text and WorkflowRun.objects.filter(erased_at__isnull=False).count() == 0

    done = admin_client.post(page, {"cancel_live": "on"}, follow=True)
    assert done.status_code == 200 and "2 runs erased" in done.text
    assert live.status() == "canceled"
    run_page = admin_client.get(f"{RUNS}{finished.id}/change/").text
    assert "Payloads erased" in run_page and "by admin" in run_page and FORGET not in run_page
    logged = LogEntry.objects.filter(object_id__in=[str(finished.id), str(live.id)], change_message__contains="Erased")
    assert logged.count() == 2
