"""Values no supported database can store are refused before anything is written, the same on every database."""

from __future__ import annotations

import json

import pytest
from django.db.models import Count

from django_openworkflow.definitions.payload import MAX_DEPTH, check_text, storable_text, to_json_value
from django_openworkflow.engine.interrupts import error_from_exception
from django_openworkflow.errors import PayloadError
from django_openworkflow.models import StepAttempt, WorkflowRun
from tests.conftest import CEILING
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import poison_payloads

SURROGATE = json.loads('"\\ud800"')


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "path", "problem"),
    [
        ({"items": [1, 2, 3, {"name": "a\x00b"}]}, 'input["items"][3]["name"]', "NUL"),
        ({"a\x00": 1}, 'input["a\\u0000"]', "key that contains a NUL"),
        ({"note": "x" + SURROGATE}, 'input["note"]', "lone surrogate"),
        ({SURROGATE: 1}, 'input["\\ud800"]', "lone surrogate"),
        (nested(MAX_DEPTH + 1), "input" + "[0]" * MAX_DEPTH, f"deeper than {MAX_DEPTH}"),
    ],
)
def test_unstorable_values_name_the_path(value, path, problem):
    with pytest.raises(PayloadError) as info:
        to_json_value(value, "input of workflow 'w'", "input")
    message = str(info.value)
    assert message.startswith(f"input of workflow 'w': {path} ")
    assert problem in message


def test_nesting_up_to_the_limit_is_stored_and_far_past_it_is_a_clear_error():
    assert to_json_value(nested(MAX_DEPTH), "x") == nested(MAX_DEPTH)
    with pytest.raises(PayloadError, match=f"nests deeper than {MAX_DEPTH} levels"):
        to_json_value(nested(10_000), "x")


def test_non_bmp_text_and_escaped_look_alikes_are_fine():
    value = {"emoji": "\U0001f600", "literal": "\\u0000 and \\ud800 as text"}
    assert to_json_value(value, "x") == value


@pytest.mark.parametrize("text", ["a\x00b", "x" + SURROGATE])
def test_names_and_keys_with_unstorable_characters_are_refused(text):
    with pytest.raises(PayloadError, match="NUL|surrogate"):
        check_text(text, "idempotency_key")


def test_text_from_user_code_is_stored_escaped():
    assert storable_text("a\x00b" + SURROGATE) == "a\\x00b\\ud800"

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    error = error_from_exception(Unprintable())
    assert "str() raised RuntimeError" in error["message"]
    json.dumps(error)  # and it encodes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["output", "name", "message"])
@pytest.mark.parametrize("nul", [True, False], ids=["nul", "surrogate"])
def test_a_step_with_unstorable_text_fails_its_run_without_looping(run_worker, where, nul):
    # Before, jsonb refused such a step's result, the worker took it for a
    # transient error and re-ran the step about once a second forever.
    handle = poison_payloads.run({"where": where, "nul": nul})
    run_worker(until=lambda: handle.status() in ("completed", "failed"), timeout=CEILING)
    run = handle.fetch()
    executions = SideEffect.objects.filter(run_id=handle.id).count()
    if where == "message":
        # The message is stored escaped; the step is retried by its policy (3 attempts), then fails the run.
        assert run.status == "failed" and executions == 3
        messages = StepAttempt.objects.filter(workflow_run_id=handle.id).values_list("error__message", flat=True)
        assert all("\\x00" in m or "\\ud800" in m for m in messages)
    elif where == "output":
        assert run.status == "failed" and executions == 1  # not retryable: the same value would come back
        assert "PayloadError" in json.dumps(run.error)
    else:
        assert run.status == "failed" and executions == 0  # refused before the step ran
        assert run.error["type"] == "PayloadError"
    assert WorkflowRun.objects.aggregate(n=Count("id"))["n"] == 1
