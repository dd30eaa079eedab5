"""Runs that belong to the project's objects: ``run(subject=obj)``, ``run_many(subjects=)``, ``runs_for(obj)``."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group

from django_openworkflow import list_runs, runs_for, start_runs
from django_openworkflow.client import operations
from django_openworkflow.client.listing import run_json
from django_openworkflow.client.subjects import find_subject, parse_subject
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import WorkflowRun
from django_openworkflow.testing import drain
from tests.conftest import CEILING
from tests.fixtures.languageapp.workflows import poller
from tests.fixtures.testapp.models import Coupon, Order, RushOrder
from tests.fixtures.testapp.workflows import always_fails, three_steps

pytestmark = pytest.mark.django_db(databases="__all__")


def test_a_run_started_with_a_subject_is_among_its_runs_and_no_other_objects() -> None:
    first, second = Order.objects.create(reference="A-1"), Order.objects.create(reference="A-2")
    mine = three_steps.run({"start": 1}, subject=first)
    theirs = three_steps.run({"start": 2}, subject=second)
    loose = three_steps.run({"start": 3})
    assert [run.id for run in runs_for(first)] == [mine.id]
    assert [run.id for run in runs_for(second)] == [theirs.id]
    stored = WorkflowRun.objects.get(id=mine.id)
    assert (stored.subject_type, stored.subject_id) == ("testapp.order", str(first.pk))
    assert run_json(stored)["subject"] == {"type": "testapp.order", "id": str(first.pk)}
    assert run_json(WorkflowRun.objects.get(id=loose.id))["subject"] is None
    assert mine.subject() == ("testapp.order", str(first.pk)) and loose.subject() is None
    assert str(mine.subject()) == f"testapp.order:{first.pk}"
    # The text form finds the same runs (an object since deleted has only that).
    assert [run.id for run in runs_for(f"testapp.order:{first.pk}")] == [mine.id]
    assert [run.id for run in list_runs(subject=first).runs] == [mine.id]
    assert [run.id for run in list_runs(subject=f"testapp.order:{second.pk}").runs] == [theirs.id]


def test_run_many_links_each_run_to_its_own_subject() -> None:
    orders = [Order.objects.create(reference=f"B-{n}") for n in range(3)]
    handles = three_steps.run_many([{"start": n} for n in range(4)], subjects=[*orders, None])
    for order, handle in zip(orders, handles, strict=False):
        assert [run.id for run in runs_for(order)] == [handle.id]
    assert WorkflowRun.objects.get(id=handles[3].id).subject_type is None
    with pytest.raises(InvalidArgument, match="2 subjects for 3 inputs"):
        start_runs("three-steps", [1, 2, 3], subjects=orders[:2])
    with pytest.raises(InvalidArgument, match="subject 1 must be a saved model instance"):
        start_runs("three-steps", [1, 2], subjects=[orders[0], "testapp.order:1"])
    assert WorkflowRun.objects.count() == 4  # a refused call starts nothing


def test_a_subject_must_be_a_saved_model_instance() -> None:
    with pytest.raises(InvalidArgument, match="must be a saved model instance") as caught:
        three_steps.run(subject=42)
    assert caught.value.argument == "subject"
    with pytest.raises(InvalidArgument, match="not saved yet"):
        three_steps.run(subject=Order(reference="unsaved"))
    with pytest.raises(InvalidArgument, match="must be a saved model instance"):
        runs_for(42)  # type: ignore[arg-type]
    assert WorkflowRun.objects.count() == 0


def test_text_keys_and_any_model_are_subjects() -> None:
    coupon = Coupon.objects.create(code="Spring-10")
    group = Group.objects.create(name="reviewers")
    on_coupon = three_steps.run(subject=coupon)
    on_group = three_steps.run(subject=group)
    assert [run.id for run in runs_for(coupon)] == [on_coupon.id]
    assert [run.id for run in runs_for(group)] == [on_group.id]
    # Keys are compared as they are (also on MariaDB, whose default collation ignores case).
    assert not runs_for("testapp.coupon:spring-10").exists()
    assert find_subject("testapp.coupon:Spring-10") == coupon


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("order-42", "must be written app_label.model:pk"),
        ("testapp.nosuchmodel:1", "'testapp.nosuchmodel' is no installed model"),
        ("nosuchapp.order:1", "is no installed model"),
        ("testapp.order:", "'' is not a primary key of testapp.order"),
        ("testapp.order:abc", "'abc' is not a primary key of testapp.order"),
        ("testapp.order:1\x00", "NUL"),
    ],
)
def test_a_bad_subject_text_is_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_subject(text)
    with pytest.raises(InvalidArgument, match=message):
        list_runs(subject=text)


def test_the_text_form_reads_the_key_as_the_model_does() -> None:
    assert parse_subject("testapp.ORDER:007") == ("testapp.order", "7")
    assert str(parse_subject("testapp.order:7")) == "testapp.order:7"


def test_a_subject_that_does_not_exist_cannot_be_found_to_start_a_run() -> None:
    with pytest.raises(InvalidArgument, match="there is no testapp.order with primary key '999'"):
        find_subject("testapp.order:999")


def test_deleting_the_object_leaves_its_runs_found_by_its_text() -> None:
    order = Order.objects.create(reference="C-1")
    key = f"testapp.order:{order.pk}"
    handle = three_steps.run(subject=order)
    order.delete()
    assert [run.id for run in runs_for(key)] == [handle.id]


def test_a_rerun_and_a_continued_run_keep_the_subject() -> None:
    order = Order.objects.create(reference="D-1")
    failed = always_fails.run(subject=order)
    drain()
    assert failed.status() == "failed"
    operations.rerun(failed.id)
    operations.rerun_many([failed.id])
    runs = list(runs_for(order))
    assert len(runs) == 3 and {run.rerun_of_id for run in runs} == {None, failed.id}
    polling = poller.run({"count": 0, "until": 6}, subject=order)
    drain()
    assert polling.result(timeout=CEILING) == 6
    chain = runs_for(order).filter(workflow_name="lang-poller")
    assert chain.count() == 2 and chain.filter(continued_from_id=polling.id).exists()


def test_a_subject_key_longer_than_a_column_is_refused() -> None:
    coupon = Coupon(code="x" * 256)
    coupon._state.adding = False  # as if read back: a key no column of runs holds
    with pytest.raises(InvalidArgument, match="at most 255 characters"):
        three_steps.run(subject=coupon)


def test_a_proxy_instance_is_the_subject_of_its_concrete_model() -> None:
    order = Order.objects.create(reference="E-1")
    rush = RushOrder.objects.get(pk=order.pk)
    handle = three_steps.run(subject=rush)
    assert [run.id for run in runs_for(order)] == [handle.id] == [run.id for run in runs_for(rush)]
    assert parse_subject(f"testapp.rushorder:{order.pk}") == ("testapp.order", str(order.pk))
