"""Hostile code and failing writes: nothing kills a worker slot, nothing loops, a hung step is visible and bounded."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator

import pytest
from django.db import connection

from django_openworkflow.engine.execute import ENGINE_ERROR_LIMIT
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.states import StepKind, StepStatus
from django_openworkflow.worker import loop as worker_module
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import (
    exits_in_a_step,
    exits_in_the_body,
    hangs_first_time,
    poison_write,
    three_steps,
)

pytestmark = pytest.mark.django_db(transaction=True)

# A trigger that refuses the completion of the step "poison-write": a write error
# that is not about the connection or a lock, made by the database itself.
POISON = {
    "postgresql": [
        """CREATE FUNCTION owf_test_poison() RETURNS trigger AS $$
        BEGIN
            IF NEW.step_name = 'poison-write' AND NEW.status = 'completed' THEN
                RAISE EXCEPTION 'poisoned write' USING ERRCODE = '22023';
            END IF;
            RETURN NEW;
        END; $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER owf_test_poison BEFORE INSERT OR UPDATE ON openworkflow_step_attempt
        FOR EACH ROW EXECUTE FUNCTION owf_test_poison()""",
    ],
    "sqlite": [
        f"""CREATE TRIGGER owf_test_poison_{event} BEFORE {event} ON openworkflow_step_attempt
        WHEN NEW.step_name = 'poison-write' AND NEW.status = 'completed'
        BEGIN SELECT RAISE(ABORT, 'poisoned write'); END"""
        for event in ("INSERT", "UPDATE")
    ],
    # MySQL's SIGNAL surfaces as an OperationalError (transient); a value too long
    # for its column is a DataError, as on the other databases.
    "mysql": [
        f"""CREATE TRIGGER owf_test_poison_{event} BEFORE {event} ON openworkflow_step_attempt FOR EACH ROW
        BEGIN IF NEW.step_name = 'poison-write' AND NEW.status = 'completed' THEN
            SET NEW.status = REPEAT('x', 40); END IF; END"""
        for event in ("INSERT", "UPDATE")
    ],
}
UNPOISON = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS owf_test_poison ON openworkflow_step_attempt",
        "DROP FUNCTION IF EXISTS owf_test_poison()",
    ],
    "sqlite": ["DROP TRIGGER IF EXISTS owf_test_poison_INSERT", "DROP TRIGGER IF EXISTS owf_test_poison_UPDATE"],
    "mysql": ["DROP TRIGGER IF EXISTS owf_test_poison_INSERT", "DROP TRIGGER IF EXISTS owf_test_poison_UPDATE"],
}


@pytest.fixture
def poisoned_step() -> Iterator[None]:
    with connection.cursor() as cursor:
        for sql in POISON[connection.vendor]:
            cursor.execute(sql)
    yield
    with connection.cursor() as cursor:
        for sql in UNPOISON[connection.vendor]:
            cursor.execute(sql)


def effects(run_id: object, step: str) -> int:
    return SideEffect.objects.filter(run_id=run_id, step=step).count()


def test_a_write_the_database_refuses_fails_the_run_after_a_bounded_number_of_tries(poisoned_step, run_worker):
    handle = poison_write.run()
    run_worker(until=lambda: handle.status() == "failed", timeout=CEILING)
    run = handle.fetch()
    assert run.error["type"] == "EngineError"
    assert "poisoned write" in run.error["message"] or "Data too long" in run.error["message"]
    assert run.error["occurrences"] == ENGINE_ERROR_LIMIT
    # One execution per slice, and each slice after the first was charged the one before.
    assert effects(handle.id, "poison-write") == ENGINE_ERROR_LIMIT
    charged = StepAttempt.objects.filter(workflow_run_id=handle.id, status=StepStatus.FAILED)
    assert [a.error["type"] for a in charged] == ["EngineError"] * (ENGINE_ERROR_LIMIT - 1)


def test_sys_exit_in_a_step_or_the_body_fails_the_run_and_every_slot_keeps_working():
    bad = [exits_in_a_step.run(), exits_in_the_body.run(), exits_in_a_step.run(), exits_in_the_body.run()]
    good = [three_steps.run({"start": i}) for i in range(12)]
    worker = Worker(concurrency=4, poll_interval="10ms", drain_timeout="10s")
    alive: list[int] = []

    def done() -> bool:
        finished = WorkflowRun.objects.finished().count() == len(bad) + len(good)
        if finished:
            alive.append(sum(thread.is_alive() for thread in worker._slot_threads.values()))
        return finished

    worker.run(until=done, install_signal_handlers=False)
    assert alive == [4]
    assert [h.status() for h in good] == ["completed"] * len(good)
    for handle in bad:
        run = handle.fetch()
        assert run.status == "failed"
        assert "SystemExit" in json.dumps(run.error), run.error
    step_error = StepAttempt.objects.filter(workflow_run_id=bad[0].id, status="failed").first().error
    assert step_error["type"] == "SystemExit"
    assert effects(bad[0].id, "leave") == 2  # its retry policy: two attempts


def test_sys_exit_in_worker_processes_leaves_the_other_runs_alone(workers):
    bad = [exits_in_a_step.run() for _ in range(3)] + [exits_in_the_body.run() for _ in range(3)]
    good = [three_steps.run({"start": i}) for i in range(30)]
    workers.start("--concurrency", "4", "--poll", "20ms")
    workers.start("--concurrency", "4", "--poll", "20ms")
    assert [h.result(timeout=CEILING) for h in good] == [{"result": i * 10 + 1} for i in range(30)]
    wait_until(lambda: all(h.status() == "failed" for h in bad), timeout=CEILING)
    assert all(p.poll() is None for p in workers.procs)  # both workers are still running


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_a_slot_thread_that_dies_anyway_is_replaced(monkeypatch):
    real = worker_module.recycle_connections
    died = threading.Event()

    def dies_once() -> None:
        if threading.current_thread().name.startswith("owf-slot") and not died.is_set():
            died.set()
            raise SystemExit("a slot dies")
        real()

    monkeypatch.setattr(worker_module, "recycle_connections", dies_once)
    handles = [three_steps.run({"start": i}) for i in range(6)]
    worker = Worker(concurrency=2, poll_interval="10ms")
    alive: list[int] = []

    def done() -> bool:
        finished = all(h.status() == "completed" for h in handles)
        if finished:
            wait_until(lambda: sum(t.is_alive() for t in worker._slot_threads.values()) == 2, timeout=CEILING)
            alive.append(2)
        return finished

    worker.run(until=done, install_signal_handlers=False)
    assert died.is_set()
    assert alive == [2]


def test_a_hung_step_is_visible_and_sigterm_releases_it_after_the_drain_timeout(workers):
    handle = hangs_first_time.run()
    proc = workers.start("--poll", "20ms", "--drain-timeout", "2s")
    wait_until(lambda: effects(handle.id, "hang") == 1)

    def open_attempt() -> StepAttempt | None:
        return StepAttempt.objects.filter(
            workflow_run_id=handle.id, step_name="hang", kind=StepKind.RUN, status=StepStatus.RUNNING
        ).first()

    # The watchdog records the start of a step running longer than half a second (the step hangs for minutes).
    wait_until(lambda: open_attempt() is not None, timeout=CEILING)
    assert open_attempt().started_at is not None
    assert handle.fetch().worker_id is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0  # the 2 s drain timeout bounds the exit, not the step.s hour
    # Released to other workers at once, not after its 30 s lease.
    run = handle.fetch()
    assert run.worker_id is None and run.status == "running"
    workers.start("--poll", "20ms")
    assert handle.result(timeout=CEILING) == "finished"
    assert effects(handle.id, "hang") == 2
