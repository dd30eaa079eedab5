"""Subjects across the faces: 100 runs over 10 orders, run by a real worker, then found per order everywhere.

The runs go through a ``manage.py runworkflows`` subprocess; then each order's
runs are read with ``runs_for``, on the order's own admin page
(``WorkflowRunsMixin``), in the run list filtered by subject, through the
HTTP API and through ``manage.py workflows list``: each shows exactly that
order's runs. Bad subjects are refused with a clear error on each face.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management.base import CommandError
from django.test import Client

from django_openworkflow import runs_for
from django_openworkflow.models import WorkflowRun
from tests.cli.helpers import as_json, workflows
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import Coupon, Order
from tests.fixtures.testapp.workflows import always_fails, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

ORDERS = 10
RUNS_EACH = 10  # 9 that complete, 1 that fails


def start_runs() -> dict[int, set[str]]:
    """10 runs for each of 10 orders (one of them fails); each order's run ids, as text."""
    orders = [Order.objects.create(reference=f"R-{n}") for n in range(ORDERS)]
    started: dict[int, set[str]] = {order.pk: set() for order in orders}
    completing = [order for order in orders for _ in range(RUNS_EACH - 1)]
    handles = three_steps.run_many([{"start": n} for n in range(len(completing))], subjects=completing)
    for order, handle in zip(completing, handles, strict=True):
        started[order.pk].add(str(handle.id))
    for order in orders:
        started[order.pk].add(str(always_fails.run(subject=order).id))
    three_steps.run({"start": 0})  # a run of no order: listed by none
    return started


def finished() -> int:
    return WorkflowRun.objects.filter(status__in=("completed", "failed")).count()


def run_ids_in(html: str) -> set[str]:
    return set(re.findall(r'data-run-id="([0-9a-f-]{36})"', html))


def test_each_order_shows_exactly_its_runs_everywhere(workers: Any, admin_client: Client) -> None:
    started = start_runs()
    workers.start("--concurrency", "4", "--poll", "20ms")
    wait_until(lambda: finished() == ORDERS * RUNS_EACH + 1, timeout=CEILING, interval=0.1)
    failed = WorkflowRun.objects.filter(status="failed", subject_type="testapp.order").count()
    assert failed == ORDERS  # the failing run of each order ran and failed
    for pk, run_ids in started.items():
        order = Order.objects.get(pk=pk)
        subject = f"testapp.order:{pk}"
        assert {str(run.id) for run in runs_for(order)} == run_ids
        # The order's own admin page: its runs, the failure with its error.
        page = admin_client.get(f"/shop-admin/testapp/order/{pk}/change/")
        assert page.status_code == 200
        html = page.content.decode()
        assert run_ids_in(html) == run_ids
        assert html.count("owf-error-cell") == 1 and "10 runs" in html
        # The run list filtered by subject.
        listed = admin_client.get("/admin/django_openworkflow/workflowrun/", {"subject": subject})
        assert {str(run.id) for run in listed.context["cl"].result_list} == run_ids
        # The HTTP API and the command line.
        answer = admin_client.get("/workflows/api/runs", {"subject": subject, "limit": "50"}).json()
        assert {run["id"] for run in answer["runs"]} == run_ids
        assert {run["subject"]["id"] for run in answer["runs"]} == {str(pk)}
        assert {run["id"] for run in as_json("list", "--subject", subject, "--limit", "50")} == run_ids
    # Filters combine: one order's failed runs.
    pk, run_ids = next(iter(started.items()))
    failing = as_json("list", "--subject", f"testapp.order:{pk}", "--status", "failed")
    assert len(failing) == 1 and failing[0]["id"] in run_ids


def test_a_bad_subject_is_a_clear_error_on_every_face(admin_client: Client) -> None:
    three_steps.run(subject=Order.objects.create(reference="X"))
    # The admin's run list: no runs, and a message saying why (not a 500).
    page = admin_client.get("/admin/django_openworkflow/workflowrun/", {"subject": "testapp.nosuch:1"})
    assert page.status_code == 200 and list(page.context["cl"].result_list) == []
    assert "&#x27;testapp.nosuch&#x27; is no installed model" in page.content.decode()
    # The API: 400 with the field named.
    for value, code in (
        ("order-1", "invalid"),
        ("testapp.nosuch:1", "bad_subject"),
        ("testapp.order:x", "bad_subject"),
    ):
        answer = admin_client.get("/workflows/api/runs", {"subject": value})
        assert answer.status_code == 400 and answer.json()["error"]["code"] == code, (value, answer.json())
        assert answer.json()["error"]["field"] == "subject"
    # Starting through the API needs an object that exists.
    start = admin_client.post(
        "/workflows/api/runs",
        {"workflow": "three-steps", "subject": "testapp.order:999999"},
        content_type="application/json",
    )
    assert start.status_code == 400 and start.json()["error"]["code"] == "bad_subject"
    assert WorkflowRun.objects.count() == 1
    # The command line: a CommandError naming the option.
    with pytest.raises(
        CommandError, match="--subject must be written app_label.model:pk, such as shop.order:42, got 'order-1'"
    ):
        workflows("list", "--subject", "order-1")
    with pytest.raises(CommandError, match="there is no testapp.order with primary key '999999'"):
        workflows("start", "three-steps", "--subject", "testapp.order:999999")


def test_a_run_started_from_the_api_and_the_cli_with_a_subject(admin_client: Client) -> None:
    order = Order.objects.create(reference="S-1")
    subject = f"testapp.order:{order.pk}"
    start = admin_client.post(
        "/workflows/api/runs", {"workflow": "three-steps", "subject": subject}, content_type="application/json"
    )
    assert start.status_code == 201 and start.json()["run"]["subject"] == {"type": "testapp.order", "id": str(order.pk)}
    started = as_json("start", "three-steps", "--subject", subject)
    assert started["subject"]["id"] == str(order.pk)
    assert {str(run.id) for run in runs_for(order)} == {start.json()["run"]["id"], started["id"]}
    assert f"subject          {subject}" in workflows("show", started["id"])


def test_only_users_who_may_view_runs_see_an_objects_runs(django_user_model: Any) -> None:
    order = Order.objects.create(reference="P-1")
    handle = three_steps.run(subject=order)
    user = django_user_model.objects.create_user("clerk", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="change_order"))
    client = Client()
    client.force_login(user)
    page = client.get(f"/shop-admin/testapp/order/{order.pk}/change/").content.decode()
    assert str(handle.id) not in page and "Workflow runs" not in page
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    user = django_user_model.objects.get(pk=user.pk)  # permissions are cached on the user object
    client.force_login(user)
    page = client.get(f"/shop-admin/testapp/order/{order.pk}/change/").content.decode()
    assert run_ids_in(page) == {str(handle.id)}
    # Viewing is not acting: the actions need the change (or add) permission on runs.
    assert "owf-subject-action" not in page


def test_the_run_page_names_the_subject_and_the_section_links_to_all_its_runs(admin_client: Client) -> None:
    order = Order.objects.create(reference="L-1")
    handles = three_steps.run_many([{"start": n} for n in range(23)], subjects=[order] * 23)
    page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{handles[0].id}/change/").content.decode()
    assert f"testapp.order:{order.pk}" in page  # no admin page of its own on this site: no link, the text
    assert f"?subject=testapp.order%3A{order.pk}" in page
    section = admin_client.get(f"/shop-admin/testapp/order/{order.pk}/change/").content.decode()
    newest = {str(run.id) for run in runs_for(order)[:20]}  # one start: ordered by id within its one time
    assert len(newest) == 20 and run_ids_in(section) == newest  # as many as workflow_runs_limit says
    assert "All 23 runs in the run list" in section
    # The add page has no object, so no section.
    assert "owf-subject-runs" not in admin_client.get("/shop-admin/testapp/order/add/").content.decode()


def test_a_change_form_template_of_ones_own_places_the_section_itself(admin_client: Client) -> None:
    coupon = Coupon.objects.create(code="Spring-10")
    handle = three_steps.run(subject=coupon)
    page = admin_client.get("/shop-admin/testapp/coupon/Spring-10/change/")
    assert [template.name for template in page.templates][0] == "testapp/coupon_change_form.html"
    html = page.content.decode()
    assert "coupon-form-top" in html and run_ids_in(html) == {str(handle.id)}
