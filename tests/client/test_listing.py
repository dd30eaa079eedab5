"""Finding runs: search by input (JSON containment, one rule on every database), list_runs, a run's steps."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_openworkflow import RunNotFound, get_run, list_runs
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.store.core import contains
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)

INPUTS: dict[str, Any] = {
    "lyon": {
        "customer": 42,
        "plan": "pro",
        "tags": ["vip", "new"],
        "address": {"city": "Lyon", "zip": "69001"},
        "active": True,
        "note": None,
    },
    "float": {"customer": 42.0, "plan": "Pro", "tags": ["new"], "address": {"city": "lyon"}, "active": False},
    "text": {"customer": "42", "tags": "vip", "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]},
    "ints": {"customer": 1, "active": 1, "items": [{"sku": "a", "qty": 3}], "nested": {"deep": {"x": [1, [2, 3]]}}},
    "array": ["customer", 42],
    "scalar": "customer",
    "null": None,
    "keys": {"key.with.dots": "v", "ünï": "çødé", "space key": 1, "$": "dollar"},
    "empty": {},
}

# pattern -> the inputs that contain it, written out: the rule itself is what is tested.
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"customer": 42}, {"lyon", "float"}),  # numbers by value; "42" is a string
    ({"customer": 42.0}, {"lyon", "float"}),
    ({"customer": "42"}, {"text"}),
    ({"plan": "pro"}, {"lyon"}),  # case-sensitive everywhere
    ({"tags": ["vip"]}, {"lyon"}),
    ({"tags": "vip"}, {"text"}),  # a string is not in an array below the top level
    ({"tags": []}, {"lyon", "float"}),
    ({"tags": ["new", "vip"]}, {"lyon"}),
    ({"address": {"city": "Lyon"}}, {"lyon"}),
    ({"address": {}}, {"lyon", "float"}),
    ({"active": True}, {"lyon"}),  # true is not 1
    ({"active": False}, {"float"}),
    ({"active": 1}, {"ints"}),
    ({"note": None}, {"lyon"}),
    ({"missing": None}, set()),
    ({"items": [{"sku": "a"}]}, {"text", "ints"}),
    ({"items": [{"sku": "a", "qty": 2}]}, set()),  # one element must hold both
    ({"items": [{"sku": "b"}, {"qty": 1}]}, {"text"}),
    ({"nested": {"deep": {"x": [[3]]}}}, {"ints"}),
    ({"nested": {"deep": {"x": [2]}}}, set()),  # 2 is in a nested array, not an element
    ({"key.with.dots": "v"}, {"keys"}),
    ({"ünï": "çødé"}, {"keys"}),
    ({"space key": 1, "$": "dollar"}, {"keys"}),
    ({}, {"lyon", "float", "text", "ints", "keys", "empty"}),  # every object, no array or scalar
]


@pytest.fixture
def inputs() -> dict[str, uuid.UUID]:
    return {name: three_steps.run(value).id for name, value in INPUTS.items()}


@pytest.mark.parametrize(("pattern", "expected"), CASES, ids=[json.dumps(p, ensure_ascii=False) for p, _ in CASES])
def test_the_database_finds_what_the_rule_says(inputs: dict[str, uuid.UUID], pattern: Any, expected: set[str]) -> None:
    # The written-out expectation and the Python rule agree, and the database agrees with both.
    assert {name for name, value in INPUTS.items() if contains(value, pattern)} == expected
    found = get_backend().input_containing(WorkflowRun.objects.filter(id__in=inputs.values()), pattern)
    by_id = {run_id: name for name, run_id in inputs.items()}
    assert {by_id[run_id] for run_id in found.values_list("id", flat=True)} == expected


def test_list_runs_filters_by_input_and_the_other_filters_together(inputs: dict[str, uuid.UUID]) -> None:
    page = list_runs(input_contains={"customer": 42}, workflow="three-steps", status="pending")
    assert {run.id for run in page.runs} == {inputs["lyon"], inputs["float"]} and page.next_cursor is None
    assert list_runs(input_contains={"customer": 42}, status=["completed", "failed"]).runs == []
    assert list_runs(input_contains={"customer": 42}, workflow="another").runs == []


def test_list_runs_pages_newest_first_without_repeats_or_gaps() -> None:
    started = [three_steps.run({"n": i}).id for i in range(7)]
    seen: list[uuid.UUID] = []
    cursor = None
    pages = 0
    while True:
        page = list_runs(limit=3, cursor=cursor)
        seen += [run.id for run in page.runs]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
        # A run started between pages is newer than the cursor: it neither shifts nor repeats the rest.
        if pages == 1:
            three_steps.run({"late": True})
    assert pages == 3 and seen == list(reversed(started))


def test_list_runs_filters_by_status_queue_and_time_range() -> None:
    old = three_steps.run({"n": 1}, queue="slow")
    WorkflowRun.objects.filter(id=old.id).update(created_at=timezone.now() - timedelta(days=2), status="failed")
    new = three_steps.run({"n": 2})
    yesterday = timezone.now() - timedelta(days=1)
    assert [run.id for run in list_runs(created_after=yesterday).runs] == [new.id]
    assert [run.id for run in list_runs(created_before=yesterday).runs] == [old.id]
    assert [run.id for run in list_runs(queue="slow").runs] == [old.id]
    assert [run.id for run in list_runs(status="failed").runs] == [old.id]
    assert [run.id for run in list_runs(status=["failed", "pending"]).runs] == [new.id, old.id]


def test_list_runs_leaves_payloads_out_unless_asked() -> None:
    three_steps.run({"big": "x" * 1000})
    assert "input" in list_runs().runs[0].get_deferred_fields()
    run = list_runs(payloads=True).runs[0]
    assert not run.get_deferred_fields() and run.input == {"big": "x" * 1000}


@pytest.mark.parametrize(
    ("arguments", "argument", "message"),
    [
        ({"status": "sleeping"}, "status", "unknown status 'sleeping'"),
        ({"workflow": ""}, "workflow", "workflow must be a name"),
        ({"queue": "a\x00b"}, "queue", "NUL"),
        ({"created_after": "2026-01-01"}, "created_after", "aware datetime"),
        ({"created_before": timezone.now().replace(tzinfo=None)}, "created_before", "aware datetime"),
        ({"input_contains": [42]}, "input_contains", "is a JSON object"),
        ({"input_contains": {"a": float("nan")}}, "input_contains", "number JSON cannot hold"),
        ({"input_contains": {'a"b': 1}}, "input_contains", "quotes"),
        ({"input_contains": {"a": 2**70}}, "input_contains", "too large"),
        ({"limit": 0}, "limit", "from 1 to 500"),
        ({"limit": True}, "limit", "from 1 to 500"),
        ({"cursor": "not-a-cursor"}, "cursor", "not a cursor"),
    ],
)
def test_list_runs_names_a_bad_filter(arguments: dict[str, Any], argument: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message) as caught:
        list_runs(**arguments)
    assert caught.value.argument == argument


def test_a_handles_steps_are_its_journal_in_order(run_worker: Any) -> None:
    handle = three_steps.run({"start": 3})
    assert handle.steps() == []
    run_worker(until=lambda: handle.status() == "completed")
    steps = handle.steps()
    assert [(step.step, step.kind, step.status) for step in steps] == [
        ("one", "run", "completed"),
        ("two", "run", "completed"),
        ("three", "run", "completed"),
    ]
    assert steps[0].output == {"n": 3} and steps[0].attempt == 1 and steps[0].finished_at is not None
    assert steps[0].error is None
    with pytest.raises(RunNotFound):
        get_run(uuid.uuid4()).steps()


# -- the CLI and the admin ------------------------------------------------------


def test_the_cli_lists_runs_by_input(inputs: dict[str, uuid.UUID]) -> None:
    out = StringIO()
    call_command("workflows", "list", "--input", '{"address": {"city": "Lyon"}}', "--json", stdout=out)
    assert [row["id"] for row in json.loads(out.getvalue())] == [str(inputs["lyon"])]
    for bad, message in (("[42]", "--input: an input search is a JSON object"), ("{oops", "--input")):
        with pytest.raises(CommandError, match=message):
            call_command("workflows", "list", "--input", bad, stdout=StringIO())


def test_the_admin_search_finds_runs_by_input(admin_client: Any, inputs: dict[str, uuid.UUID]) -> None:
    url = "/admin/django_openworkflow/workflowrun/"
    response = admin_client.get(url, {"q": '{"customer": 42}'})
    assert {run.id for run in response.context["cl"].result_list} == {inputs["lyon"], inputs["float"]}
    response = admin_client.get(url, {"q": '{"customer": 42'})
    assert response.status_code == 200 and list(response.context["cl"].result_list) == []
    assert any("not valid JSON" in str(m) for m in response.context["messages"])
