"""What step code can know of its lease and its attempt: ``ctx.lease_held()`` and ``ctx.attempt()``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow import RetryPolicy, StepUsageError, workflow
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import CEILING

pytestmark = pytest.mark.django_db(transaction=True)

LEASE = timedelta(seconds=30)

# What step code saw, appended on the thread that runs it; read by the test once the slice ended.
seen: list[Any] = []
# What the step's code does in the middle of its work, set by each test.
during_step: list[Callable[[], Any]] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    seen.clear()
    during_step.clear()
    yield


def claim(worker_id: str = "worker-a"):
    (claimed,) = get_backend().claim(worker_id, 1, LEASE)
    return claimed


def take_over(worker_id: str = "worker-b"):
    """Another worker claims the run, as after a freeze longer than the lease."""
    WorkflowRun.objects.update(available_at=timezone.now() - timedelta(seconds=1))
    return claim(worker_id)


@workflow(name="test-lease-held")
def checks_its_lease(ctx):
    def work():
        seen.append(("before", ctx.lease_held(), ctx.lease_held(check=True)))
        for hook in during_step:
            hook()
        seen.append(("after", ctx.lease_held(), ctx.lease_held(check=True), ctx.lease_held()))
        return 1

    return ctx.step.run("work", work)


def test_the_lease_is_held_during_a_normal_step():
    handle = checks_its_lease.run()
    assert execute_slice(get_backend(), claim(), lambda: True).outcome == Outcome.COMPLETED
    assert seen == [("before", True, True), ("after", True, True, True)]
    assert handle.result() == 1


def test_a_lease_taken_over_by_another_worker_is_not_held_and_the_local_check_remembers_it():
    checks_its_lease.run()
    during_step.append(take_over)
    # The local check cannot know before anything tells this worker: it asks the database.
    assert execute_slice(get_backend(), claim(), lambda: True).outcome == Outcome.LEASE_LOST
    assert seen == [("before", True, True), ("after", True, False, False)]


def test_a_lease_that_ran_out_in_the_database_is_not_held_even_before_anyone_takes_the_run():
    handle = checks_its_lease.run()

    def expire() -> None:
        WorkflowRun.objects.filter(id=handle.id).update(available_at=timezone.now() - timedelta(seconds=1))

    during_step.append(expire)
    execute_slice(get_backend(), claim(), lambda: True)
    assert seen[1][:3] == ("after", True, False)


def test_the_local_check_says_no_once_the_heartbeats_could_not_renew_the_lease():
    checks_its_lease.run()
    renewed = [True]
    during_step.append(lambda: renewed.append(False))  # a freeze: the worker's clock ran past its lease
    execute_slice(get_backend(), claim(), lambda: renewed[-1])
    assert seen[1][:2] == ("after", False)


# -- the attempt ---------------------------------------------------------------------------------


@workflow(name="test-attempt-ids", step_retry_policy=RetryPolicy(initial_interval="10ms", maximum_attempts=3))
def attempt_ids(ctx):
    def charge():
        attempt = ctx.attempt()
        seen.append(attempt)
        for hook in during_step:
            hook()
        if ctx.input.get("fail_first") and len(seen) == 1:
            raise RuntimeError("the payment API timed out")
        return attempt.id

    return ctx.step.run("charge", charge)


def test_each_attempt_has_its_own_id_and_all_share_the_idempotency_key(run_worker):
    handle = attempt_ids.run({"fail_first": True})
    run_worker(until=lambda: handle.status() == "completed", timeout=CEILING)
    first, second = seen
    assert (first.number, second.number) == (1, 2)
    assert first.id == f"{handle.id}:charge#1" and second.id == f"{handle.id}:charge#2"
    assert first.idempotency_key == second.idempotency_key == f"{handle.id}:charge"
    assert handle.result() == second.id


def test_an_attempt_run_again_before_its_end_was_recorded_keeps_its_id():
    # The worker hands the run back in the middle of the step (as at shutdown): nothing
    # records the attempt's end, so the next slice runs the same attempt again.
    handle = attempt_ids.run({})
    claimed = claim()
    during_step.append(lambda: get_backend().release(claimed, timedelta(0)))
    assert execute_slice(get_backend(), claimed).outcome == Outcome.LEASE_LOST
    during_step.clear()
    assert execute_slice(get_backend(), claim("worker-b")).outcome == Outcome.COMPLETED
    assert [attempt.id for attempt in seen] == [f"{handle.id}:charge#1"] * 2
    assert handle.result() == f"{handle.id}:charge#1"


def test_a_worker_that_lost_its_lease_mid_step_and_its_successor_have_different_ids_and_one_key():
    handle = attempt_ids.run({})
    taken: list[Any] = []
    during_step.append(lambda: taken.append(take_over()))
    assert execute_slice(get_backend(), claim()).outcome == Outcome.LEASE_LOST
    during_step.clear()
    assert execute_slice(get_backend(), taken[0]).outcome == Outcome.COMPLETED
    frozen, successor = seen
    assert (frozen.number, successor.number) == (1, 2)  # the lost attempt is charged as failed
    assert frozen.idempotency_key == successor.idempotency_key == f"{handle.id}:charge"


@workflow(name="test-attempt-everywhere")
def attempt_everywhere(ctx):
    key = lambda: ctx.attempt().id.rsplit(":", 1)[1]  # noqa: E731
    timed = ctx.step.run("timed", key, timeout="10s")  # on a thread of its own
    group = ctx.step.parallel([("p1", key), ("p2", key)])
    outside = "refused"
    try:
        ctx.attempt()
        outside = "allowed"
    except StepUsageError:
        pass
    return [timed, *group, outside]


def test_step_code_on_threads_of_its_own_sees_its_own_attempt_and_the_workflow_body_none():
    handle = attempt_everywhere.run()
    assert execute_slice(get_backend(), claim()).outcome == Outcome.COMPLETED
    assert handle.result() == ["timed#1", "p1#1", "p2#1", "refused"]


@workflow(name="test-attempt-async")
async def attempt_async(ctx):
    async def on_the_loop():
        await asyncio.sleep(0)
        return ctx.attempt().step

    def on_a_thread():
        return [ctx.attempt().step, ctx.lease_held(check=True)]

    return await asyncio.gather(ctx.step.run("loop", on_the_loop), ctx.step.run("thread", on_a_thread))


def test_async_steps_see_their_own_attempt():
    handle = attempt_async.run()
    assert execute_slice(get_backend(), claim()).outcome == Outcome.COMPLETED
    assert handle.result() == ["loop", ["thread", True]]
