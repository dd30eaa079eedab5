"""Typed run attributes: declared, set at the start or by ``ctx.set_attribute``, filtered on as their type.

The filters run on the real database (SQLite, PostgreSQL, MariaDB): the
values are chosen so that text order and numeric order disagree (9 and
10, 9.5 and 10.25) and so that datetimes given in different time zones
order by their instant, not by their text.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from django.utils import timezone as dj_timezone

from django_openworkflow import WorkflowRegistrationError, list_runs, workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import RunAttribute, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.store.prune import delete_runs
from django_openworkflow.store.records import AttributeWrite, Fence, LeaseLost
from django_openworkflow.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

PARIS = timezone(timedelta(hours=1))
NEW_YORK = timezone(timedelta(hours=-5))


@workflow(
    name="attr-order",
    attributes={"customer_id": int, "region": str, "amount": Decimal, "due": datetime},
)
def attr_order(ctx):
    return "ok"


@workflow(name="attr-stages", attributes={"stage": int, "region": str})
def attr_stages(ctx):
    ctx.set_attribute("stage", 1)
    ctx.step.sleep("nap", "1m")  # a new slice: the call above is replayed
    ctx.set_attribute("stage", 2)
    ctx.set_attribute("region", "eu")
    ctx.step.run("work", lambda: "done")
    ctx.set_attribute("stage", 3)
    return "ok"


@workflow(name="attr-misuse", attributes={"stage": int})
def attr_misuse(ctx):
    what = ctx.input["what"]
    if what == "in-step":
        ctx.step.run("s", lambda: ctx.set_attribute("stage", 1))
    elif what == "undeclared":
        ctx.set_attribute("colour", "red")
    elif what == "wrong-type":
        ctx.set_attribute("stage", "two")
    return "ok"


def ids(page):
    return {run.id for run in page.runs}


def test_values_given_at_the_start_are_stored_as_their_types():
    due = datetime(2026, 12, 1, 9, 30, tzinfo=PARIS)
    handle = attr_order.run(
        attributes={"customer_id": 42, "region": "eu", "amount": Decimal("10.25"), "due": due},
    )
    assert str(handle.attributes()["amount"]) == "10.25"  # not the column's 10.250000
    assert handle.attributes() == {
        "amount": Decimal("10.25"),
        "customer_id": 42,
        "due": due.astimezone(UTC),
        "region": "eu",
    }
    assert RunAttribute.objects.filter(workflow_run_id=handle.id).count() == 4
    assert attr_order.run().attributes() == {}


def test_run_many_gives_each_run_its_own_values():
    first, second, third = attr_order.run_many(
        [{}, {}, {}], attributes=[{"customer_id": 1}, None, {"customer_id": 3, "region": "us"}]
    )
    assert first.attributes() == {"customer_id": 1}
    assert second.attributes() == {}
    assert third.attributes() == {"customer_id": 3, "region": "us"}


def test_run_many_with_more_or_fewer_attribute_dicts_than_inputs_is_refused_and_writes_nothing():
    for given in ([{"customer_id": 1}, None], [None, None, None, None]):
        with pytest.raises(
            InvalidArgument, match=f"{len(given)} attribute dicts for 3 inputs: give one per input"
        ) as caught:
            attr_order.run_many([{}, {}, {}], attributes=given)
        assert caught.value.argument == "attributes"
    assert not WorkflowRun.objects.exists()


def test_an_idempotent_repeat_writes_no_second_value():
    first = attr_order.run(idempotency_key="k", attributes={"customer_id": 1})
    again = attr_order.run(idempotency_key="k", attributes={"customer_id": 2})
    assert again == first and not again.created
    assert first.attributes() == {"customer_id": 1}


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"colour": "red"}, r"unknown attribute 'colour'; declared: amount \(Decimal\), customer_id \(int\), due"),
        ({"customer_id": "42"}, "attribute 'customer_id' expects int, got str '42'"),
        ({"customer_id": True}, "attribute 'customer_id' expects int, got bool True"),
        ({"customer_id": 2**63}, "expects int \\(a 64-bit integer\\)"),
        ({"amount": 10.25}, "attribute 'amount' expects Decimal .*got float 10.25"),
        ({"amount": Decimal("1.1234567")}, "at most 9 digits before the point and 6 after"),
        ({"amount": Decimal("1234567890")}, "at most 9 digits before the point and 6 after"),
        ({"amount": Decimal("NaN")}, "a finite Decimal"),
        ({"due": datetime(2026, 1, 1)}, "expects datetime \\(an aware datetime: give it a time zone\\)"),
        ({"region": "x" * 256}, "at most 255 characters"),
        (["region"], "attributes must be a dict of name to value"),
    ],
)
def test_a_bad_value_at_the_start_is_refused_and_no_run_is_written(values, says):
    with pytest.raises(InvalidArgument, match=says) as caught:
        attr_order.run(attributes=values)
    assert caught.value.argument == "attributes"
    assert not WorkflowRun.objects.exists()
    with pytest.raises(InvalidArgument, match=says):
        attr_order.run_many([{}], attributes=[values])
    assert not WorkflowRun.objects.exists()


@pytest.mark.parametrize(
    ("attributes", "says"),
    [
        ({"amount": float}, "attribute 'amount' has type <class 'float'>; the supported types are int, str"),
        ({"Amount": int}, "attribute name 'Amount' is not allowed"),
        ({"amount__gte": int}, "attribute name 'amount__gte' is not allowed"),
        ({"": int}, "attribute name '' is not allowed"),
        ([("amount", int)], "attributes must be a dict of name to type"),
    ],
)
def test_a_bad_declaration_is_refused_at_import(attributes, says):
    with pytest.raises(WorkflowRegistrationError, match=f"workflow 'attr-bad': {says}"):
        workflow(name="attr-bad", attributes=attributes)(lambda ctx: None)
    assert registry.get("attr-bad", None) is None


def test_set_attribute_is_written_once_per_boundary_and_a_replay_never_goes_back():
    handle = attr_stages.run()
    slices = drain()
    assert len(slices) >= 2  # the sleep made a second slice, which replayed stage=1
    assert handle.result() == "ok"
    assert handle.attributes() == {"region": "eu", "stage": 3}
    row = RunAttribute.objects.get(workflow_run_id=handle.id, name="stage")
    assert row.position == 3  # its calls were the 1st, 2nd and 4th: the last one won
    assert ids(list_runs(attributes={"stage": 3})) == {handle.id}


def test_a_worker_that_lost_the_run_writes_no_attribute():
    handle = attr_stages.run()
    store = get_backend()
    with pytest.raises(LeaseLost):
        store.flush(Fence(handle.id, "not-the-holder", store.now(), [AttributeWrite("stage", 0, int, 7)]))
    assert handle.attributes() == {}


def test_a_stored_value_is_replaced_only_by_one_of_a_later_position():
    handle = attr_stages.run(attributes={"stage": 0})
    store = get_backend()
    (claimed,) = store.claim("holder", 1, timedelta(seconds=30))
    assert claimed.run.id == handle.id

    def write(position, value):
        store.flush(Fence(handle.id, "holder", store.now(), [AttributeWrite("stage", position, int, value)]))

    write(5, 50)  # replaces the start's value
    assert handle.attributes() == {"stage": 50}
    write(2, 20)  # a replay's earlier call: nothing older is written
    write(5, 51)  # the same position again: nothing either
    assert handle.attributes() == {"stage": 50}
    write(6, 60)
    assert handle.attributes() == {"stage": 60}


@pytest.mark.parametrize(
    ("what", "says"),
    [
        ("in-step", "StepUsageError: ctx.set_attribute() was called inside step 's'"),
        ("undeclared", "unknown attribute 'colour'; declared: stage (int)"),
        ("wrong-type", "attribute 'stage' expects int, got str 'two'"),
    ],
)
def test_misuse_of_set_attribute_fails_the_run_with_a_clear_error(what, says):
    handle = attr_misuse.run({"what": what})
    drain()
    assert handle.status() == "failed"
    assert says in handle.fetch().error["message"]
    assert handle.attributes() == {}


@pytest.fixture
def orders():
    """Runs whose values order differently as text and as their type."""
    made = {}
    for key, customer, amount, due in [
        ("nine", 9, Decimal("9.5"), datetime(2026, 12, 1, 10, 0, tzinfo=PARIS)),  # 09:00 UTC
        ("ten", 10, Decimal("10.25"), datetime(2026, 12, 1, 4, 0, tzinfo=NEW_YORK)),  # 09:00 UTC too
        ("hundred", 100, Decimal("100"), datetime(2026, 12, 1, 9, 30, tzinfo=UTC)),
        ("minus", -5, Decimal("-0.000001"), datetime(2026, 12, 1, 23, 0, tzinfo=NEW_YORK)),  # 04:00 next day UTC
    ]:
        made[key] = attr_order.run(
            attributes={"customer_id": customer, "amount": amount, "due": due, "region": key.upper()}
        ).id
    attr_order.run()  # no attributes: never matched
    return made


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"customer_id": 10}, {"ten"}),
        ({"customer_id__gt": 9}, {"ten", "hundred"}),
        ({"customer_id__gte": 9}, {"nine", "ten", "hundred"}),
        ({"customer_id__lt": 10}, {"nine", "minus"}),
        ({"customer_id__lte": 10, "customer_id__gte": 0}, {"nine", "ten"}),
        ({"customer_id__in": [9, 100, 7]}, {"nine", "hundred"}),
        ({"amount": Decimal("10.250")}, {"ten"}),
        ({"amount__gt": Decimal("9.5")}, {"ten", "hundred"}),
        ({"amount__gte": Decimal("9.5")}, {"nine", "ten", "hundred"}),
        ({"amount__lt": Decimal("10")}, {"nine", "minus"}),
        ({"amount__lt": 0}, {"minus"}),
        ({"amount__in": [Decimal("9.5"), Decimal("100.0")]}, {"nine", "hundred"}),
        ({"due": datetime(2026, 12, 1, 9, 0, tzinfo=UTC)}, {"nine", "ten"}),
        ({"due__gt": datetime(2026, 12, 1, 4, 0, tzinfo=NEW_YORK)}, {"hundred", "minus"}),
        ({"due__lte": datetime(2026, 12, 1, 10, 30, tzinfo=PARIS)}, {"nine", "ten", "hundred"}),
        ({"due__lt": datetime(2026, 12, 1, 9, 30, tzinfo=UTC), "amount__gt": 10}, {"ten"}),
        ({"region": "TEN"}, {"ten"}),
        ({"region": "ten"}, set()),  # byte for byte on every database
        ({"region__in": ["NINE", "MINUS"]}, {"nine", "minus"}),
    ],
)
def test_filters_compare_each_type_as_its_type_on_every_database(orders, filters, expected):
    assert ids(list_runs(attributes=filters)) == {orders[key] for key in expected}
    assert ids(list_runs(workflow="attr-order", attributes=filters)) == {orders[key] for key in expected}


@pytest.mark.parametrize(
    ("filters", "says"),
    [
        ({"amount__gte": "10"}, "attribute 'amount' expects Decimal"),
        ({"colour": "red"}, "unknown attribute 'colour'; declared: amount"),
        ({"amount__between": 1}, "unknown lookup 'between' in 'amount__between'; use one of eq, gt, gte, lt, lte, in"),
        ({"amount__in": Decimal("1")}, "'amount__in' takes a list of values"),
        ({"due": datetime(2026, 1, 1)}, "an aware datetime"),
    ],
)
def test_a_bad_filter_names_the_problem(filters, says):
    with pytest.raises(InvalidArgument, match=says):
        list_runs(attributes=filters)


def test_text_filters_are_parsed_as_their_types(orders):
    from django_openworkflow.client.listing import run_filter

    where = run_filter(
        attributes={"amount__gte": "9.5", "due__lt": "2026-12-01T10:30:00+01:00", "customer_id__in": "9,10"},
        attributes_as_text=True,
    )
    assert {run.id for run in where.apply(WorkflowRun.objects.all())} == {orders["nine"], orders["ten"]}
    with pytest.raises(InvalidArgument, match="attribute 'customer_id' expects int such as 42, got 'ten'"):
        run_filter(attributes={"customer_id": "ten"}, attributes_as_text=True)


def test_one_name_declared_with_two_types_needs_the_workflow():
    from django_openworkflow.checks import check_attributes

    assert check_attributes() == []
    clash = workflow(name="attr-clash", attributes={"amount": int})(lambda ctx: None)
    try:
        (warning,) = check_attributes()
        assert warning.id == "openworkflow.W009"
        assert warning.msg.startswith("attribute 'amount' is declared with different types: Decimal by 'attr-order'")
        assert warning.msg.endswith("; int by 'attr-clash'")
        with pytest.raises(InvalidArgument, match="attribute 'amount' is declared as Decimal by one workflow"):
            list_runs(attributes={"amount": 1})
        assert list_runs(workflow="attr-clash", attributes={"amount": 1}).runs == []
    finally:
        registry.unregister(clash.name, clash.version)


def test_pruning_a_run_deletes_its_attributes(orders):
    from django.db import transaction

    with transaction.atomic(using=RunAttribute.objects.db):
        delete_runs([orders["nine"]])
    assert not RunAttribute.objects.filter(workflow_run_id=orders["nine"]).exists()
    assert RunAttribute.objects.filter(workflow_run_id=orders["ten"]).count() == 4


def test_now_is_an_aware_datetime_attribute():
    handle = attr_order.run(attributes={"due": dj_timezone.now()})
    assert handle.attributes()["due"].tzinfo is not None


# -- the faces: the admin, the HTTP API, the command line --

RUN_LIST = "/admin/django_openworkflow/workflowrun/"


def test_the_admin_run_list_filters_by_attribute_and_the_run_page_shows_them(orders, admin_client):
    listed = admin_client.get(RUN_LIST, {"attribute": ["amount__gte=9.5", "due__lt=2026-12-01T10:30:00+01:00"]})
    assert listed.status_code == 200
    assert {run.id for run in listed.context["cl"].result_list} == {orders["nine"], orders["ten"]}
    html = listed.content.decode()
    assert "<code>amount__gte=9.5</code>" in html and 'list="owf-attribute-names"' in html
    assert '<option value="customer_id=" label="customer_id (int)"></option>' in html
    # Filters combine with the others: one workflow, one status.
    listed = admin_client.get(RUN_LIST, {"attribute": "customer_id__in=9,100", "workflow": "attr-order"})
    assert {run.id for run in listed.context["cl"].result_list} == {orders["nine"], orders["hundred"]}
    # The run page lists them, each a link to the runs with that value.
    page = admin_client.get(f"{RUN_LIST}{orders['ten']}/change/").content.decode()
    assert "<code>customer_id</code> = 10</a>" in page
    assert "?attribute=region%3DTEN" in page
    listed = admin_client.get(RUN_LIST, {"attribute": "region=TEN"})
    assert [run.id for run in listed.context["cl"].result_list] == [orders["ten"]]


def test_a_bad_attribute_filter_in_the_admin_shows_no_runs_and_says_why(orders, admin_client):
    for value, says in (
        ("colour=red", "unknown attribute &#x27;colour&#x27;"),
        ("amount__gte=ten", "attribute &#x27;amount&#x27; expects Decimal such as 10.25, got &#x27;ten&#x27;"),
        ("amount", "is not NAME[__LOOKUP]=VALUE"),
    ):
        page = admin_client.get(RUN_LIST, {"attribute": value})
        assert page.status_code == 200 and list(page.context["cl"].result_list) == []
        assert says in page.content.decode(), value


def test_the_api_filters_by_attribute_and_says_what_is_wrong(orders, admin_client):
    answer = admin_client.get("/workflows/api/runs", {"attribute": ["amount__gt=9.5", "customer_id__lte=100"]})
    assert answer.status_code == 200
    assert {run["id"] for run in answer.json()["runs"]} == {str(orders["ten"]), str(orders["hundred"])}
    for value, says in (
        ("colour=red", "unknown attribute 'colour'"),
        ("due__gte=tomorrow", "attribute 'due' expects datetime such as 2026-11-25T09:30:00+01:00"),
        ("due__gte=2026-12-01T00:00:00", "an aware datetime: give it a time zone"),
    ):
        answer = admin_client.get("/workflows/api/runs", {"attribute": value})
        assert answer.status_code == 400, value
        error = answer.json()["error"]
        assert error["code"] == "bad_attribute" and error["field"] == "attribute" and says in error["message"]


def test_the_command_line_lists_by_attribute_and_shows_them(orders):
    from django.core.management.base import CommandError

    from tests.cli.helpers import as_json, workflows

    listed = as_json("list", "--attribute", "amount__lt=10", "--attribute", "customer_id__gte=0")
    assert [run["id"] for run in listed] == [str(orders["nine"])]
    shown = workflows("show", str(orders["ten"]))
    assert "attributes       amount=10.25, customer_id=10, due=" in shown and "region=TEN" in shown
    assert "amount=100," in workflows("show", str(orders["hundred"]))
    started = as_json("start", "attr-order", "--attribute", "amount=12.5", "--attribute", "customer_id=7")
    assert started["attributes"] == {"amount": "12.5", "customer_id": 7}
    with pytest.raises(CommandError, match="attribute 'customer_id' expects int such as 42, got 'seven'"):
        workflows("start", "attr-order", "--attribute", "customer_id=seven")
    with pytest.raises(CommandError, match="--attribute: attribute filter: unknown attribute 'colour'"):
        workflows("list", "--attribute", "colour=red")
    with pytest.raises(CommandError, match="--attribute 'region' is not NAME"):
        workflows("list", "--attribute", "region")


def test_the_json_of_a_run_carries_its_attributes_and_the_api_starts_runs_with_them(orders, admin_client):
    from tests.cli.helpers import as_json

    shown = as_json("show", str(orders["ten"]))["attributes"]
    assert shown == {"amount": "10.25", "customer_id": 10, "due": "2026-12-01T09:00:00Z", "region": "TEN"}
    listed = admin_client.get("/workflows/api/runs", {"attribute": "customer_id=10"}).json()["runs"]
    assert [run["attributes"] for run in listed] == [shown]
    assert {run["id"]: run["attributes"] for run in as_json("list", "--limit", "50")}[str(orders["ten"])] == shown
    started = admin_client.post(
        "/workflows/api/runs",
        {
            "workflow": "attr-order",
            "attributes": {"customer_id": 7, "amount": "12.5", "due": "2026-12-01T10:00:00+01:00", "region": "eu"},
        },
        content_type="application/json",
    )
    assert started.status_code == 201, started.json()
    assert started.json()["run"]["attributes"] == {
        "amount": "12.5",
        "customer_id": 7,
        "due": "2026-12-01T09:00:00Z",
        "region": "eu",
    }
    for attributes, says in (
        ({"amount": 12.5}, "attribute 'amount' expects Decimal"),
        ({"colour": "red"}, "unknown attribute 'colour'"),
        ({"due": "2026-12-01"}, "an aware datetime"),
        ({"region": 5}, "attribute 'region' expects str, got int 5"),
    ):
        refused = admin_client.post(
            "/workflows/api/runs", {"workflow": "attr-order", "attributes": attributes}, content_type="application/json"
        )
        assert refused.status_code == 400, attributes
        error = refused.json()["error"]
        assert error["code"] == "bad_attribute" and error["field"] == "attributes" and says in error["message"]
    assert WorkflowRun.objects.count() == len(orders) + 2  # the fixture's, and the one started above


@pytest.mark.django_db(transaction=False)
def test_set_attribute_on_the_in_memory_backend_is_replayed_and_never_goes_back():
    from django_openworkflow.testing.memory import Clock, InMemoryBackend
    from django_openworkflow.testing.memory import drain as drain_memory
    from django_openworkflow.testing.memory import start as start_memory

    clock = Clock()
    backend = InMemoryBackend(clock=clock)
    run_id = start_memory(backend, attr_stages)
    drain_memory(backend)
    assert backend.run_attributes(run_id) == {"stage": 1}  # written with the sleep
    clock.advance("1m")
    drain_memory(backend)  # replays stage=1 first: it writes nothing older
    assert backend.run_outcome(run_id).output == "ok"
    assert backend.run_attributes(run_id) == {"region": "eu", "stage": 3}
