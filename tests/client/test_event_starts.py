"""Event-triggered starts: ``@workflow(on_event=...)`` and ``send_event`` / ``publish_event``."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.test import override_settings

from django_openworkflow import (
    Concurrency,
    Debounce,
    OnEvent,
    WorkflowRegistrationError,
    publish_event,
    send_event,
    workflow,
)
from django_openworkflow.definitions.registry import registry
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import Event, WorkflowRun
from tests.conftest import CEILING, race
from tests.fixtures import event_workflows
from tests.fixtures.event_workflows import echo, echo_again

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 10


@pytest.fixture
def declare():
    """Register workflows for one test, unregistered afterwards (no other test's event starts them)."""
    made = []

    def make(name, fn=echo, **options):
        spec = workflow(name=name, **options)(fn)
        made.append(spec)
        return spec

    yield make
    for spec in made:
        registry.unregister(spec.name, spec.version)


@pytest.fixture
def dispatched():
    event_workflows.dispatched.clear()
    with override_settings(OPENWORKFLOW={"DISPATCH": "tests.fixtures.event_workflows.OnCommitDispatcher"}):
        yield event_workflows.dispatched
    event_workflows.dispatched.clear()


def runs_of(name):
    return list(WorkflowRun.objects.filter(workflow_name=name).order_by("created_at"))


# -- declarations --


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        (lambda: OnEvent(""), "non-empty string of at most 255"),
        (lambda: OnEvent("x" * 256), "non-empty string of at most 255"),
        (lambda: OnEvent(42), "non-empty string of at most 255"),  # type: ignore[arg-type]
        (lambda: OnEvent("order\x00paid"), "NUL"),
        (lambda: OnEvent("order.paid", match={"id": float("nan")}), "NaN"),
        (lambda: OnEvent("order.paid", match={"id": {1, 2}}), "not JSON-serializable"),
        (lambda: OnEvent("order.paid", match={"name": "a\ud800"}), "surrogate"),
        (lambda: OnEvent("order.paid", match=[1]), "must be a dict"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_event_type_or_match_fails_at_declaration(declaration, message):
    bad = declaration()  # keeps its error: @workflow raises it with the workflow's name
    with pytest.raises(WorkflowRegistrationError, match=message):
        bad.check()
    with pytest.raises(WorkflowRegistrationError, match=f"^workflow 'ev-bad-object': .*{message}"):
        workflow(name="ev-bad-object", on_event=bad)(lambda ctx: None)


@pytest.mark.parametrize(
    ("on_event", "message"),
    [
        ("", "non-empty string"),
        ("bad\x00type", "NUL"),
        (42, "on_event must be an event type, an OnEvent or a list of them"),
        (["ok", 42], "on_event must be an event type"),
    ],
)
def test_a_bad_on_event_names_the_workflow(declare, on_event, message):
    with pytest.raises(WorkflowRegistrationError, match=message) as caught:
        declare("ev-bad-declaration", on_event=on_event)
    assert "ev-bad-declaration" in str(caught.value)
    assert registry.get("ev-bad-declaration", None) is None


def test_the_match_is_stored_as_json_reads_it_back():
    assert OnEvent("t", match={"ids": (1, 2)}).match == {"ids": [1, 2]}
    assert OnEvent("t").match == {}


# -- starts --


def test_one_run_per_matching_workflow_with_the_payload_as_input(declare, dispatched):
    declare("ev-fulfil", on_event="ev.order.paid")
    declare("ev-invoice", fn=echo_again, on_event=[OnEvent("ev.order.paid"), "ev.order.refunded"])
    declare("ev-other", on_event="ev.order.shipped")
    declare("ev-plain")
    payload = {"order": {"id": 7, "total": "9.99"}}

    assert send_event("ev.order.paid", payload) == 0  # the int it always returned: runs woken

    event = Event.objects.get(event_type="ev.order.paid")
    for name in ("ev-fulfil", "ev-invoice"):
        (run,) = runs_of(name)
        assert run.input == payload and run.status == "pending"
        assert run.idempotency_key == f"event:{event.id}"
    assert runs_of("ev-other") == [] and runs_of("ev-plain") == []
    started = sorted(run_id for run_id, _ in dispatched)
    assert started == sorted(run.id for name in ("ev-fulfil", "ev-invoice") for run in runs_of(name))

    sent = publish_event("ev.order.refunded", {"order": {"id": 8}})
    assert sent.woke == 0 and not sent.repeat
    assert [handle.created for handle in sent.started] == [True]
    assert sent.started[0].fetch().workflow_name == "ev-invoice"


def test_a_pattern_the_payload_does_not_contain_starts_nothing(declare):
    declare("ev-eur", on_event=OnEvent("ev.paid", match={"currency": "EUR", "tags": ["vip"]}))

    assert publish_event("ev.paid", {"currency": "USD", "tags": ["vip"]}).started == []
    assert publish_event("ev.paid", {"currency": "EUR", "tags": ["new"]}).started == []
    assert publish_event("ev.paid", {"currency": "EUR"}).started == []
    assert publish_event("ev.paid", ["EUR"]).started == []
    assert publish_event("ev.other", {"currency": "EUR", "tags": ["vip"]}).started == []
    assert runs_of("ev-eur") == []

    sent = publish_event("ev.paid", {"currency": "EUR", "tags": ["new", "vip"], "amount": 3})
    assert [handle.fetch().workflow_name for handle in sent.started] == ["ev-eur"]


def test_several_subscriptions_matching_one_event_start_one_run(declare):
    declare("ev-twice", on_event=[OnEvent("ev.x", match={"a": 1}), OnEvent("ev.x", match={"b": 2})])
    assert len(publish_event("ev.x", {"a": 1, "b": 2}).started) == 1
    assert len(runs_of("ev-twice")) == 1


def test_a_repeated_idempotency_key_starts_nothing_more(declare, dispatched):
    declare("ev-once", on_event="ev.once")
    declare("ev-once-matched", on_event=OnEvent("ev.once", match={"n": 1}))
    first = publish_event("ev.once", {"n": 1}, idempotency_key="provider-evt-1")
    assert len(first.started) == 2 and all(handle.created for handle in first.started)

    # A repeat (even with another payload, which the second workflow's match refuses)
    # starts nothing and reports the first send's runs.
    again = publish_event("ev.once", {"n": 2}, idempotency_key="provider-evt-1")
    assert again.repeat and again.event_id == first.event_id and again.woke == 0
    assert again.started == first.started and not any(handle.created for handle in again.started)
    assert send_event("ev.once", {"n": 3}, idempotency_key="provider-evt-1") == 0
    (run,), (matched,) = runs_of("ev-once"), runs_of("ev-once-matched")
    assert run.input == matched.input == {"n": 1}
    assert sorted(dispatched) == sorted([(run.id, "default"), (matched.id, "default")])

    other = publish_event("ev.once", {"n": 4}, idempotency_key="provider-evt-2")
    assert other.started[0].created and len(runs_of("ev-once")) == 2


def test_a_rolled_back_send_starts_nothing(declare, dispatched):
    declare("ev-rollback", on_event="ev.rollback")
    with pytest.raises(RuntimeError), transaction.atomic():
        sent = publish_event("ev.rollback", {"n": 1}, idempotency_key="k-1")
        assert len(sent.started) == 1  # visible inside the sender's transaction
        raise RuntimeError("the view failed")
    assert runs_of("ev-rollback") == [] and not Event.objects.filter(event_type="ev.rollback").exists()
    assert dispatched == []  # told only after a commit

    with transaction.atomic():
        sent = publish_event("ev.rollback", {"n": 2}, idempotency_key="k-1")  # the key is free again
        assert dispatched == []
    assert [run.input for run in runs_of("ev-rollback")] == [{"n": 2}]
    assert dispatched == [(sent.started[0].id, "default")]


def test_the_started_run_executes_with_the_payload(declare, run_worker):
    declare("ev-execute", on_event=OnEvent("ev.execute", match={"kind": "go"}))
    payload = {"kind": "go", "items": [1, 2, 3], "note": "ünïcode"}
    (handle,) = publish_event("ev.execute", payload).started
    run_worker()
    assert handle.result(timeout=CEILING) == payload


def test_a_subscribed_workflow_gets_its_flow_control(declare, dispatched):
    declare(
        "ev-flow",
        on_event="ev.flow",
        queue="events",
        priority=7,
        concurrency=Concurrency(2, key=lambda payload: payload["customer"]),
    )
    (handle,) = publish_event("ev.flow", {"customer": "c1"}).started
    run = handle.fetch()
    assert (run.queue, run.priority, run.concurrency_key, run.concurrency_limit) == ("events", 7, "ev-flow/c1", 2)
    assert dispatched == [(run.id, "events")]


def test_a_key_function_that_fails_refuses_the_send_and_writes_nothing(declare):
    declare("ev-keyed", on_event="ev.keyed", concurrency=Concurrency(1, key=lambda payload: payload["customer"]))
    with pytest.raises(InvalidArgument, match="ev-keyed"):
        send_event("ev.keyed", {"no customer": True})
    assert not Event.objects.filter(event_type="ev.keyed").exists() and runs_of("ev-keyed") == []


def test_the_latest_version_starts_and_its_declaration_decides(declare):
    declare("ev-versioned", version="v1", on_event="ev.v")
    declare("ev-versioned", version="v2", on_event="ev.v")
    (handle,) = publish_event("ev.v", {}).started
    assert handle.fetch().version == "v2"

    declare("ev-moved", version="v1", on_event="ev.old")
    declare("ev-moved", version="v2", on_event="ev.new")
    assert publish_event("ev.old", {}).started == []  # v1's subscription no longer counts
    assert [h.fetch().version for h in publish_event("ev.new", {}).started] == ["v2"]


def test_a_debounced_subscriber_folds_events_into_one_run(declare):
    declare("ev-debounced", on_event="ev.edited", debounce=Debounce("1h", key=lambda payload: payload["doc"]))
    first = publish_event("ev.edited", {"doc": 1, "rev": 1}).started
    second = publish_event("ev.edited", {"doc": 1, "rev": 2}).started
    assert first == second and first[0].created and not second[0].created
    (run,) = runs_of("ev-debounced")
    assert run.input == {"doc": 1, "rev": 2}


def test_concurrent_sends_with_one_key_start_one_run_per_workflow(declare, dispatched):
    declare("ev-race-a", on_event="ev.race")
    declare("ev-race-b", on_event=OnEvent("ev.race", match={"order": 7}))
    results = race(lambda: publish_event("ev.race", {"order": 7}, idempotency_key="race-1"), THREADS)

    assert Event.objects.filter(event_type="ev.race").count() == 1
    (a,), (b,) = runs_of("ev-race-a"), runs_of("ev-race-b")
    assert sorted(str(h.id) for h in results[0].started) == sorted(str(r.id) for r in (a, b))
    assert all({h.id for h in sent.started} == {a.id, b.id} for sent in results)
    assert sum(h.created for sent in results for h in sent.started) == 2
    assert sorted(run_id for run_id, _ in dispatched) == sorted([a.id, b.id])
