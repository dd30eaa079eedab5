"""Every bad declaration fails at @workflow, naming the workflow: the keyword forms and the objects alike.

The objects (``Concurrency(0)``) are made before ``@workflow`` is called, so
they keep what is wrong with them and ``@workflow`` raises it with the name.
"""

from __future__ import annotations

import pytest

from django_openworkflow import (
    Concurrency,
    Debounce,
    OnEvent,
    RateLimit,
    Schedule,
    WorkflowRegistrationError,
    workflow,
)
from django_openworkflow.client.schedules import next_ticks
from django_openworkflow.definitions.registry import registry

NAME = "decl-bad"


def _noop(ctx):
    return None


@pytest.mark.parametrize(
    ("options", "original"),
    [
        ({"concurrency": 0}, "Concurrency limit must be a whole number of at least 1, got 0"),
        ({"concurrency": Concurrency(0)}, "Concurrency limit must be a whole number of at least 1, got 0"),
        ({"concurrency": Concurrency(2, key=42)}, "Concurrency key must be None, a string"),
        ({"concurrency": Concurrency(2, count_parked="yes")}, "Concurrency count_parked must be True or False"),
        ({"rate_limit": RateLimit(0)}, "RateLimit limit must be a whole number of at least 1"),
        ({"rate_limit": RateLimit(5, per="0s")}, "RateLimit per must be longer than zero, got '0s'"),
        ({"rate_limit": RateLimit(5, per="soon")}, "RateLimit per: "),
        ({"debounce": Debounce("0s")}, "Debounce period must be longer than zero, got '0s'"),
        ({"debounce": Debounce("1s", max_wait="0s")}, "Debounce max_wait must be longer than zero"),
        ({"schedule": "not a cron"}, "invalid cron expression 'not a cron'"),
        ({"schedule": Schedule("not a cron")}, "invalid cron expression 'not a cron'"),
        ({"schedule": Schedule("0 0 31 2 *")}, "cron expression '0 0 31 2 *' never fires"),
        ({"schedule": Schedule("* * * * *", timezone="Mars/Olympus")}, "unknown time zone 'Mars/Olympus'"),
        ({"schedule": Schedule("* * * * *", missed="all")}, "missed must be 'latest' or 'skip'"),
        ({"on_event": OnEvent("")}, "OnEvent event type must be a non-empty string"),
        ({"on_event": ["ok", OnEvent("order.paid", match=[1])]}, "must be a dict (a JSON object)"),
        ({"on_event": ""}, "OnEvent event type must be a non-empty string"),
        ({"queue": "has spaces"}, "queue must be 1 to 64 characters"),
        ({"priority": 5000}, "priority must be a whole number from -1000 to 1000"),
        ({"step_timeout": "0s"}, "step_timeout '0s'"),
        ({"retention": "soon"}, "retention"),
        ({"version": 2}, "version must be None or a non-empty string"),
        ({"retry_policy": {"maximum_attempts": 3}}, "retry_policy must be a RetryPolicy"),
    ],
)
def test_a_bad_declaration_names_the_workflow_and_keeps_the_original_error(options, original):
    with pytest.raises(WorkflowRegistrationError) as caught:
        workflow(name=NAME, **options)(_noop)
    message = str(caught.value)
    assert message.startswith(f"workflow {NAME!r}: "), message
    assert original in message
    cause = caught.value.__cause__
    if cause is not None:  # a re-raised error: chained to the original, with its message
        assert original in str(cause) or str(cause) in message
    assert registry.get(NAME, None) is None


@pytest.mark.parametrize(
    ("declaration", "keyword"),
    [
        (lambda: Concurrency(0), "concurrency"),
        (lambda: RateLimit(5, per="0s"), "rate_limit"),
        (lambda: Debounce("0s"), "debounce"),
        (lambda: Schedule("not a cron"), "schedule"),
        (lambda: Schedule("* * * * *", timezone="Mars/Olympus"), "schedule"),
        (lambda: OnEvent(""), "on_event"),
    ],
)
def test_an_object_raises_at_workflow_chained_to_its_own_error(declaration, keyword):
    bad = declaration()  # made before @workflow is called: it cannot know the name yet
    with pytest.raises(WorkflowRegistrationError) as own:
        bad.check()
    with pytest.raises(WorkflowRegistrationError) as caught:

        @workflow(name=NAME, **{keyword: bad})
        def decl_bad(ctx):
            return None

    assert str(caught.value) == f"workflow {NAME!r}: {own.value}"
    assert type(caught.value) is type(own.value)
    assert caught.value.__cause__ is not None and str(caught.value.__cause__) == str(own.value)
    assert registry.get(NAME, None) is None


def test_the_same_bad_object_names_each_workflow_that_uses_it():
    shared = Concurrency(0)
    for name in ("decl-first", "decl-second"):
        with pytest.raises(WorkflowRegistrationError, match=f"^workflow '{name}': Concurrency limit"):
            workflow(name=name, concurrency=shared)(_noop)


def test_good_objects_check_quietly_and_compare_by_their_fields():
    for good in (Concurrency(2, key="tenant"), RateLimit(5, per="1s"), Debounce("1s"), OnEvent("order.paid")):
        good.check()
    assert Concurrency(0) == Concurrency(0)  # what is wrong is not a field
    assert repr(Concurrency(0)) == "Concurrency(limit=0, key=None, count_parked=False)"


def test_next_ticks_of_a_bad_schedule_raises_its_error():
    with pytest.raises(WorkflowRegistrationError, match="unknown time zone 'Mars/Olympus'"):
        next_ticks(Schedule("* * * * *", timezone="Mars/Olympus"))
