"""Search by input finds the same runs on every database: numbers by value and exactly, one JSON type per leaf.

The inputs and each pattern's expected runs are written once, below; the test
runs on whichever database the suite runs on (SQLite, PostgreSQL, MariaDB).
Integers around 2**53 are where a database that compares JSON numbers as
doubles goes wrong: 2**53 + 1 has no double of its own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_openworkflow import list_runs
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.store.core import contains
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)

P53 = 2**53  # 9007199254740992, the last integer with a double of its own below it

INPUTS: dict[str, Any] = {
    "zero": {"n": 0},
    "negzero": {"n": -0.0},
    "one": {"n": 1},
    "onef": {"n": 1.0},
    "ones": {"n": "1"},
    "true": {"n": True},
    "false": {"n": False},
    "null": {"n": None},
    "absent": {"m": 1},
    "p53": {"n": P53},
    "p53+1": {"n": P53 + 1},
    "p53-1": {"n": P53 - 1},
    "p53f": {"n": float(P53)},
    "m53": {"n": -P53},
    "m53-1": {"n": -P53 - 1},
    "m53+1": {"n": -P53 + 1},
    "max64": {"n": 2**63 - 1},
    "min64": {"n": -(2**63)},
    "u64": {"n": 2**64 - 1},
    "neg7": {"n": -7},
    "neg7.5": {"n": -7.5},
    "half": {"n": 0.5},
    "tenth": {"n": 0.1},
    "sum": {"n": 0.1 + 0.2},
    "e16f": {"n": 1e16},  # written 1e+16: MariaDB's JSON_TYPE calls it an INTEGER
    "e16": {"n": 10**16},
    "sbig": {"n": "9007199254740993"},
    "s1.0": {"n": "1.0"},
    "list": {"n": [1, P53 + 1, "2", True, None, 1.5, {"m": -1}]},
    "deep": {"n": {"deep": {"n": P53 + 1, "list": [[P53]]}}, "tag": "x"},
    "top": [P53, 1],
    "issue_a": {"big": 9007199254740993},
    "issue_b": {"big": 9007199254740992},
}
OBJECTS = set(INPUTS) - {"top"}

# pattern -> the inputs that contain it, written out.
CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({"n": 0}, {"zero", "negzero"}),
    ({"n": 0.0}, {"zero", "negzero"}),
    ({"n": -0.0}, {"zero", "negzero"}),
    ({"n": 1e-300}, set()),  # not rounded to 0
    ({"n": 5e-324}, set()),
    ({"n": 1}, {"one", "onef"}),
    ({"n": 1.0}, {"one", "onef"}),
    ({"n": 1.0000000000000002}, set()),
    ({"n": "1"}, {"ones"}),  # a string that looks like a number is a string
    ({"n": "1.0"}, {"s1.0"}),
    ({"n": True}, {"true"}),  # true is not 1
    ({"n": False}, {"false"}),  # false is not 0
    ({"n": None}, {"null"}),  # null is not absent
    ({"n": P53}, {"p53", "p53f"}),
    ({"n": P53 + 1}, {"p53+1"}),
    ({"n": P53 - 1}, {"p53-1"}),
    ({"n": P53 + 2}, set()),
    ({"n": float(P53)}, {"p53", "p53f"}),
    ({"n": 9007199254740993.0}, {"p53", "p53f"}),  # that float literal is 2**53
    ({"n": -P53}, {"m53"}),
    ({"n": -P53 - 1}, {"m53-1"}),
    ({"n": -P53 + 1}, {"m53+1"}),
    ({"n": -float(P53)}, {"m53"}),
    ({"n": 2**63 - 1}, {"max64"}),
    ({"n": 2**63 - 2}, set()),
    ({"n": -(2**63)}, {"min64"}),
    ({"n": -(2**63) + 1}, set()),
    ({"n": -1}, set()),
    ({"n": -7}, {"neg7"}),
    ({"n": -7.0}, {"neg7"}),
    ({"n": -7.5}, {"neg7.5"}),
    ({"n": 7.5}, set()),
    ({"n": 0.5}, {"half"}),
    ({"n": 0.1}, {"tenth"}),
    ({"n": 0.1 + 0.2}, {"sum"}),
    ({"n": 0.3}, set()),
    ({"n": 1e16}, {"e16f", "e16"}),
    ({"n": 10**16}, {"e16f", "e16"}),
    ({"n": 10**16 + 1}, set()),
    ({"n": "9007199254740993"}, {"sbig"}),
    ({"n": [1]}, {"list"}),
    ({"n": [1.0]}, {"list"}),
    ({"n": [True]}, {"list"}),
    ({"n": [P53 + 1]}, {"list"}),
    ({"n": [P53]}, set()),
    ({"n": ["2"]}, {"list"}),
    ({"n": [2]}, set()),
    ({"n": [None]}, {"list"}),
    ({"n": [1.5]}, {"list"}),
    ({"n": [1.5, P53 + 1, "2"]}, {"list"}),
    ({"n": [{"m": -1}]}, {"list"}),
    ({"n": [{"m": -1.0}]}, {"list"}),
    ({"n": [{"m": 1}]}, set()),
    ({"n": [{}]}, {"list"}),
    ({"n": []}, {"list"}),
    ({"n": {}}, {"deep"}),
    ({"n": {"deep": {"n": P53 + 1}}}, {"deep"}),
    ({"n": {"deep": {"n": P53}}}, set()),
    ({"n": {"deep": {"list": [[P53]]}}}, {"deep"}),
    ({"n": {"deep": {"list": [[P53 + 1]]}}}, set()),
    ({"n": {"deep": {"list": [[float(P53)]]}}}, {"deep"}),
    ({"n": {"deep": {"list": [P53]}}}, set()),  # in a nested array, not an element
    ({"n": {"deep": {"n": P53 + 1}}, "tag": "x"}, {"deep"}),
    ({"tag": "x", "n": {}}, {"deep"}),
    ({"big": 9007199254740992}, {"issue_b"}),
    ({"big": 9007199254740993}, {"issue_a"}),
    ({"big": 9007199254740992.0}, {"issue_b"}),
    ({"m": 1}, {"absent"}),
    ({"m": True}, set()),
    ({"n": 1, "m": 1}, set()),
    ({}, OBJECTS),  # every object, not the array
]


def test_there_are_enough_patterns() -> None:
    # One pattern is written twice on purpose: the float literal 9007199254740993.0 is 2.0**53.
    assert len(CASES) >= 60 and len({json.dumps(pattern) for pattern, _ in CASES}) == len(CASES) - 1


def test_every_database_finds_the_runs_the_rule_finds() -> None:
    ids = {name: three_steps.run(value).id for name, value in INPUTS.items()}
    by_id = {run_id: name for name, run_id in ids.items()}
    runs = WorkflowRun.objects.filter(id__in=ids.values())
    wrong = []
    for pattern, expected in CASES:
        by_rule = {name for name, value in INPUTS.items() if contains(value, pattern)}
        matching = get_backend().input_containing(runs, pattern)
        found = {by_id[run_id] for run_id in matching.values_list("id", flat=True)}
        if not by_rule == found == expected:
            wrong.append(
                f"{json.dumps(pattern)}: expected {sorted(expected)}, rule {sorted(by_rule)}, in SQL {sorted(found)}"
            )
    assert wrong == []


def test_list_runs_tells_2_to_the_53_from_the_next_integer() -> None:
    # The issue's example, through the public API.
    a = three_steps.run({"big": 9007199254740993}).id
    b = three_steps.run({"big": 9007199254740992}).id
    assert [run.id for run in list_runs(input_contains={"big": 9007199254740992}).runs] == [b]
    assert [run.id for run in list_runs(input_contains={"big": 9007199254740993}).runs] == [a]
