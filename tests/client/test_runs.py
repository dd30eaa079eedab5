"""Starting, reading, waiting for and canceling runs."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from django_openworkflow import (
    ResultTimeout,
    RunNotFound,
    UnknownWorkflowError,
    WorkflowCanceled,
    WorkflowFailed,
    get_run,
    start_run,
)
from django_openworkflow.models import WorkflowRun
from tests.fixtures.testapp.workflows import always_fails, three_steps, versioned_v1

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_inserts_a_pending_run_with_its_input():
    handle = three_steps.run({"start": 5})
    run = handle.fetch()
    assert run.status == "pending" and run.workflow_name == "three-steps" and run.input == {"start": 5}
    assert get_run(str(handle.id)) == handle


def test_run_started_in_a_rolled_back_transaction_does_not_exist():
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback):
        with transaction.atomic():
            handle = three_steps.run()
            assert WorkflowRun.objects.filter(id=handle.id).exists()
            raise Rollback
    assert not WorkflowRun.objects.filter(id=handle.id).exists()
    with pytest.raises(RunNotFound):
        get_run(handle.id)


def test_run_started_in_a_committed_transaction_exists():
    with transaction.atomic():
        handle = three_steps.run()
    assert handle.status() == "pending"


def test_get_run_of_unknown_or_malformed_id():
    with pytest.raises(RunNotFound):
        get_run("00000000-0000-0000-0000-000000000000")
    with pytest.raises(RunNotFound, match="not a workflow run id"):
        get_run("not-a-uuid")


def test_result_waits_and_raises_by_outcome(run_worker):
    ok, bad = three_steps.run(), always_fails.run()
    with pytest.raises(ResultTimeout):
        ok.result(timeout=0.05)
    run_worker()
    assert ok.result(timeout=1) == {"result": 11}
    with pytest.raises(WorkflowFailed) as info:
        bad.result(timeout=1)
    assert info.value.error["step"] == "boom"


def test_cancel_is_idempotent_and_says_whether_it_changed_anything(run_worker):
    handle = three_steps.run()
    assert handle.cancel() is True
    assert handle.cancel() is False
    with pytest.raises(WorkflowCanceled):
        handle.result(timeout=1)
    run_worker()  # a canceled run is never claimed
    assert handle.fetch().status == "canceled" and handle.fetch().started_at is None
    done = three_steps.run()
    run_worker()
    assert done.cancel() is False and done.status() == "completed"


def test_idempotency_key_returns_the_first_run():
    first = three_steps.run({"start": 1}, idempotency_key="order-1")
    again = three_steps.run({"start": 2}, idempotency_key="order-1")
    other = three_steps.run({"start": 3}, idempotency_key="order-2")
    assert first == again != other
    assert WorkflowRun.objects.count() == 2


def test_idempotency_key_under_concurrency_creates_one_run():
    barrier = threading.Barrier(10)
    ids, errors = [], []

    def start():
        try:
            barrier.wait()
            ids.append(three_steps.run(idempotency_key="same-key").id)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()  # every alias this thread opened

    threads = [threading.Thread(target=start) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(ids)) == 1 and WorkflowRun.objects.count() == 1


def test_bad_start_arguments_write_nothing():
    with pytest.raises(ValueError, match="idempotency_key"):
        three_steps.run(idempotency_key="k" * 256)
    with pytest.raises(ValueError, match="already in the past"):
        three_steps.run(deadline_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(ValueError, match="timezone-aware"):
        three_steps.run(available_at=timezone.now().replace(tzinfo=None))
    with pytest.raises(ValueError, match="invalid duration 'later'"):
        three_steps.run(available_at="later")
    with pytest.raises(UnknownWorkflowError):
        start_run("no-such-workflow")
    with pytest.raises(UnknownWorkflowError):
        versioned_v1.run(version="v7")
    assert WorkflowRun.objects.count() == 0


def test_scheduled_start_waits_for_available_at(run_worker):
    handle = three_steps.run(available_at="1h")
    run_worker()
    run = handle.fetch()
    assert run.status == "pending"
    assert timedelta(minutes=59) < run.available_at - run.created_at < timedelta(minutes=61)


def test_version_defaults_to_the_highest_registered(run_worker):
    assert start_run("versioned").fetch().version == "v2"
    assert start_run("versioned", version="v1").fetch().version == "v1"
    assert versioned_v1.run().fetch().version == "v1"


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, "5"])
def test_result_refuses_a_timeout_that_is_not_a_finite_number_of_seconds(timeout):
    handle = three_steps.run()
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        handle.result(timeout=timeout)


def test_a_start_says_whether_it_created_the_run():
    first = three_steps.run(idempotency_key="order-7")
    again = three_steps.run(idempotency_key="order-7")
    assert (first.created, again.created, again == first) == (True, False, True)


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"input": {"bad": float("nan")}}, "input"),
        ({"deadline_at": "0s"}, "deadline_at"),
        ({"available_at": "99999y"}, "available_at"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "a\x00b"}, "idempotency_key"),
    ],
)
def test_argument_errors_name_their_argument(options, argument):
    from django_openworkflow.errors import InvalidArgument

    input_value = options.pop("input", None)
    with pytest.raises(InvalidArgument) as info:
        three_steps.run(input_value, **options)
    assert info.value.argument == argument
    assert WorkflowRun.objects.count() == 0


def test_operations_refuse_with_a_reason_or_say_the_run_is_missing(run_worker):
    from django_openworkflow.client import operations
    from django_openworkflow.errors import OperationRefused

    handle = three_steps.run()
    run_worker()
    with pytest.raises(OperationRefused) as info:
        operations.cancel(handle.id)
    assert (info.value.operation, info.value.reason) == ("cancel", "it has already finished (completed)")
    assert handle.cancel() is False  # the handle answers the same refusal with False
    with pytest.raises(RunNotFound):
        operations.retry_now(uuid.uuid4())
    new_id = operations.rerun(handle.id)
    assert new_id != handle.id and WorkflowRun.objects.get(id=new_id).input == handle.fetch().input
