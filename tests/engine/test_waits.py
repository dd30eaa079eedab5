"""Signals (buffered, FIFO, idempotent) and events (JSON-containment broadcast)."""

from __future__ import annotations

import signal as os_signal
import threading

import pytest
from django.db import transaction

from django_openworkflow import RunNotFound, SignalError, send_event, send_signal
from django_openworkflow.models import Event, Signal, StepAttempt
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING, is_parked, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import approval, await_payment, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def parked_on_wait(handle):
    return StepAttempt.objects.filter(
        workflow_run_id=handle.id, kind__in=["signal", "event"], status="running"
    ).exists() and (handle.fetch().worker_id is None)


@pytest.fixture
def worker():
    w = Worker(concurrency=4, poll_interval="20ms")
    thread = threading.Thread(target=w.run, kwargs={"install_signal_handlers": False})
    thread.start()
    yield w
    w.stop()
    thread.join(30)


def test_signal_sent_before_the_wait_is_buffered_then_consumed(run_worker):
    handle = approval.run({})
    assert handle.signal("approval", {"by": "ada"}) is False  # nobody waits yet: buffered
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() == [{"by": "ada"}]
    sig = Signal.objects.get()
    assert sig.consumed_by.step_name == "approval" and sig.consumed_at is not None


def test_signal_sent_after_the_wait_wakes_the_run(worker):
    handle = approval.run({})
    wait_until(lambda: parked_on_wait(handle))
    assert send_signal(handle.id, "approval", "yes") is True
    assert handle.result(timeout=CEILING) == ["yes"]


def test_two_signals_go_to_two_waits_in_order(worker):
    handle = approval.run({"waits": 2})
    handle.signal("approval", 1)
    handle.signal("approval", 2)
    assert handle.result(timeout=CEILING) == [1, 2]
    keys = list(
        StepAttempt.objects.filter(workflow_run_id=handle.id, kind="signal")
        .order_by("id")
        .values_list("step_name", "output")
    )
    assert [k for k, _ in keys] == ["approval", "approval:1"]


def test_timeout_returns_none_and_a_late_signal_stays_buffered(worker):
    handle = approval.run({"timeout": "150ms", "hold": True})
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id, step="use").exists())
    assert handle.signal("approval", "too late") is False
    # "use" recorded its side effect as it began: its attempt is written by the time
    # the run parks on "hold" (on a busy machine, not yet when the side effect shows).
    wait_until(lambda: is_parked(handle))
    late = Signal.objects.get(workflow_run_id=handle.id)
    assert late.consumed_by is None
    wait = StepAttempt.objects.get(workflow_run_id=handle.id, kind="signal")
    assert wait.status == "completed" and wait.output == {"timed_out": True}
    use = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="use")
    assert use.output == [None]


def test_idempotent_signal_is_delivered_once(worker):
    handle = approval.run({"waits": 2, "timeout": "300ms"})
    wait_until(lambda: parked_on_wait(handle))
    assert handle.signal("approval", "a", idempotency_key="k1") is True  # taken by the open wait
    assert handle.signal("approval", "a", idempotency_key="k1") is False  # the same key: nothing more
    assert handle.result(timeout=CEILING) == ["a", None]
    assert Signal.objects.filter(workflow_run_id=handle.id).count() == 1


def test_signal_to_a_finished_or_unknown_run_is_a_clear_error(run_worker):
    handle = three_steps.run({})
    run_worker()
    with pytest.raises(SignalError, match="completed"):
        handle.signal("approval")
    with pytest.raises(RunNotFound):
        send_signal("00000000-0000-0000-0000-000000000000", "approval")
    with pytest.raises(RunNotFound):
        send_signal("nope", "approval")
    assert not Signal.objects.exists()


def test_signal_in_a_rolled_back_transaction_is_never_sent():
    handle = approval.run({})
    with pytest.raises(ZeroDivisionError):
        with transaction.atomic():
            handle.signal("approval", "x")
            1 / 0
    assert not Signal.objects.exists()


def test_signal_data_must_be_json():
    handle = approval.run({})
    with pytest.raises(ValueError, match="data of signal 'approval'"):
        handle.signal("approval", object())


def test_signals_racing_with_the_wait_are_never_lost(worker):
    handles = [approval.run({}) for _ in range(30)]
    for i, handle in enumerate(handles):
        handle.signal("approval", i)
    assert [h.result(timeout=CEILING) for h in handles] == [[i] for i in range(30)]


def test_events_wake_runs_whose_pattern_the_payload_contains(worker):
    first, second = await_payment.run({"order_id": 42}), await_payment.run({"order_id": 43})
    wait_until(lambda: parked_on_wait(first) and parked_on_wait(second))
    assert send_event("order.paid", {"order": {"id": 41}}) == 0
    assert send_event("order.refunded", {"order": {"id": 42}}) == 0
    payload = {"order": {"id": 42, "total": "9.99", "lines": [1, 2]}, "via": "card"}
    assert send_event("order.paid", payload, idempotency_key="pay-42") == 1
    assert first.result(timeout=CEILING) == payload
    assert send_event("order.paid", payload, idempotency_key="pay-42") == 1  # a repeat: same answer, nobody woken again
    assert Event.objects.filter(idempotency_key="pay-42").count() == 1
    assert second.status() == "running"
    assert send_event("order.paid", {"order": {"id": 43}}) == 1
    assert second.result(timeout=CEILING) == {"order": {"id": 43}}


def test_an_event_without_a_payload_is_kept_and_wakes_no_wait_with_a_pattern(worker):
    # PostgreSQL and MariaDB narrowed the waits in SQL, where Django took None for SQL NULL and refused it.
    handle = await_payment.run({"order_id": 42})
    wait_until(lambda: parked_on_wait(handle))
    assert send_event("order.paid") == 0
    assert Event.objects.get(event_type="order.paid").payload is None
    assert handle.status() == "running"


def test_event_sent_before_the_wait_is_not_delivered(run_worker):
    assert send_event("order.paid", {"order": {"id": 7}}) == 0
    handle = await_payment.run({"order_id": 7, "timeout": "100ms"})
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result() is None


def test_worker_crash_after_delivery_loses_nothing(workers):
    handle = approval.run({"hang_first_time": True})
    first = workers.start("--lease", "1s", "--poll", "20ms")
    wait_until(lambda: parked_on_wait(handle))
    handle.signal("approval", {"ok": True})
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id, step="use").exists())
    first.send_signal(os_signal.SIGKILL)
    first.wait(10)
    workers.start("--lease", "1s", "--poll", "20ms")
    assert handle.result(timeout=CEILING) == [{"ok": True}]
    assert Signal.objects.get().consumed_by is not None
