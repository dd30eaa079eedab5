"""No step starts without a lease: a worker whose heartbeats cannot land stops its runs."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from django_openworkflow.conf import owf_settings
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.worker.loop import Worker, WorkerUnhealthy
from django_openworkflow.worker.runner import LeaseKeeper
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import STEP_GATE, gated_step, slow_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_slice_stops_before_the_next_step_when_the_lease_is_not_valid():
    handle = slow_steps.run({"steps": 3, "pause": 0})
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    checks = []

    def lease_valid():
        checks.append(1)
        return len(checks) < 2  # valid for the first step only

    result = execute_slice(get_backend(), claimed, lease_valid)
    assert result.outcome == Outcome.LEASE_LOST
    assert result.detail == "the lease could not be renewed in time; handed back"
    assert SideEffect.objects.filter(run_id=handle.id).count() == 1
    assert not StepAttempt.objects.exists()  # nothing was written without a lease
    # Handed back at once, not left to wait out a lease nobody renews.
    run = WorkflowRun.objects.get(id=handle.id)
    assert run.worker_id is None and run.available_at <= timezone.now()


def lock_everything_for(run_id, seconds, locked):
    """From another connection to the workflow tables' database, block every write to the run for ``seconds``."""
    conn = connections.create_connection(owf_settings.database)
    try:
        conn.set_autocommit(False)
        with conn.cursor() as cursor:
            if conn.vendor == "postgresql":
                cursor.execute("SELECT 1 FROM openworkflow_run WHERE id = %s FOR UPDATE", [run_id])
            else:
                cursor.execute("UPDATE openworkflow_run SET updated_at = updated_at WHERE id = %s", [run_id.hex])
            locked.set()
            time.sleep(seconds)
        conn.rollback()
    finally:
        conn.close()


def test_worker_whose_heartbeat_cannot_renew_stops_and_a_new_one_finishes_the_run(caplog, run_worker):
    handle = slow_steps.run({"steps": 2, "pause": 1.5})
    worker = Worker(concurrency=1, lease="1s", poll_interval="20ms")
    raised: list[WorkerUnhealthy] = []

    def run() -> None:
        try:
            worker.run(install_signal_handlers=False)
        except WorkerUnhealthy as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    with caplog.at_level("WARNING", logger="django_openworkflow.worker"):
        thread.start()
        try:
            wait_until(lambda: SideEffect.objects.filter(run_id=handle.id).exists())
            locked = threading.Event()
            blocker = threading.Thread(target=lock_everything_for, args=(handle.id, 2.5, locked))
            blocker.start()
            locked.wait(5)
            thread.join(30)  # it stops by itself: nobody calls stop()
            assert not thread.is_alive()
            blocker.join()
        finally:
            worker.stop()
            thread.join(30)
    assert len(raised) == 1 and "could not renew the leases" in str(raised[0])
    assert WorkflowRun.objects.get(id=handle.id).worker_id is None  # handed back, not left leased
    # It gave up instead of starting step two without a lease.
    assert "lease-lost" in caplog.text
    # What a process manager does next: a new worker, which finishes the run.
    run_worker(until=lambda: handle.status() == "completed")
    assert handle.result(timeout=0) == "done"


def test_runworkflows_that_cannot_renew_exits_non_zero(workers):
    handle = slow_steps.run({"steps": 2, "pause": 1.5})
    proc = workers.start("--lease", "1s", "--poll", "20ms", stderr=subprocess.PIPE)
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id).exists())
    locked = threading.Event()
    blocker = threading.Thread(target=lock_everything_for, args=(handle.id, 3.0, locked))
    blocker.start()
    try:
        _, stderr = proc.communicate(timeout=CEILING)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()  # and close its pipe: a pipe left open warns in a later test
        raise
    finally:
        blocker.join()
    assert proc.returncode != 0
    assert b"could not renew the leases" in stderr
    assert b"stopping this worker" in stderr


def test_lease_keeper_renews_while_slots_register_runs():
    """The race that killed the heartbeat: slot threads add to the held runs while it renews.

    A tiny switch interval makes the threads interleave inside ``renew``, as
    minutes of load at full concurrency did.
    """
    slow_steps.run({"steps": 1})
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    keeper = LeaseKeeper(get_backend(), "w", timedelta(seconds=30))
    stop = threading.Event()
    errors: list[BaseException] = []
    renewals = 0

    def register() -> None:
        while not stop.is_set():
            other = dataclasses.replace(claimed, run=dataclasses.replace(claimed.run, id=uuid.uuid4()))
            assert keeper.lease_valid(other)()

    def renew() -> None:
        nonlocal renewals
        try:
            while not stop.is_set():
                assert keeper.renew([claimed]) == 1
                renewals += 1
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threads = [threading.Thread(target=register) for _ in range(8)] + [threading.Thread(target=renew)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(1.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        sys.setswitchinterval(previous)
    assert errors == []
    assert renewals > 0


def test_supervisor_survives_a_round_that_raises(caplog, monkeypatch):
    """Whatever one heartbeat round raises, the next renews: a step longer than the lease runs once."""
    # A lease of 3 s leaves a loaded machine seconds, not milliseconds, between the failed round and the next.
    handle = slow_steps.run({"steps": 1, "pause": 4.5})
    worker = Worker(concurrency=1, lease="3s", poll_interval="20ms", burst=True)
    renew = worker.leases.renew
    calls = []

    def renew_failing_once(claimed_runs):  # an unexpected bug in one round, not a database error
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("injected")
        return renew(claimed_runs)

    monkeypatch.setattr(worker.leases, "renew", renew_failing_once)
    with caplog.at_level("ERROR", logger="django_openworkflow.worker"):
        worker.run(install_signal_handlers=False)
    assert "heartbeat round failed" in caplog.text
    assert handle.status() == "completed"
    assert SideEffect.objects.filter(run_id=handle.id).count() == 1
    assert worker.leases.renewals >= 2


def test_a_renewal_that_finds_the_run_taken_over_says_the_lease_is_lost():
    """After a freeze the heartbeat works again, but a run taken over meanwhile stays lost."""
    handle = slow_steps.run({"steps": 1})
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    keeper = LeaseKeeper(get_backend(), "w", timedelta(seconds=30))
    valid = keeper.lease_valid(claimed)
    assert valid()
    # Another worker claims it, as after a freeze longer than the lease.
    WorkflowRun.objects.filter(id=handle.id).update(available_at=timezone.now() - timedelta(seconds=1))
    assert get_backend().claim("another-worker", 1, timedelta(seconds=30))
    assert keeper.renew([claimed]) == 0
    assert not valid()
    assert not keeper.lapsed(claimed)  # the heartbeat itself works: the worker stays healthy


def test_a_run_lost_and_claimed_again_is_held_by_its_new_claim():
    """The heartbeat flags the claim it renewed, not whatever holds the run's id by the time it answers."""
    slow_steps.run({"steps": 1})
    (first,) = get_backend().claim("w", 1, timedelta(seconds=30))
    keeper = LeaseKeeper(get_backend(), "w", timedelta(seconds=30))
    get_backend().release(first, timedelta(0))  # the slice parked or let go of it ...
    (again,) = get_backend().claim("w", 1, timedelta(seconds=30))  # ... and the claim loop took it back
    WorkflowRun.objects.filter(id=first.run.id).update(worker_id="someone-else")  # gone again by the renewal
    assert keeper.renew([first]) == 0
    WorkflowRun.objects.filter(id=first.run.id).update(worker_id="w")
    assert first.lease_lost and not again.lease_lost
    assert keeper.lease_valid(again)()


def test_a_worker_whose_heartbeat_thread_died_stops_instead_of_running_on_unrenewed(monkeypatch):
    worker = Worker(concurrency=1, lease="30s", poll_interval="20ms")
    monkeypatch.setattr(worker, "_supervise", lambda: None)  # the thread ends at once, as if it had died
    give_up = time.monotonic() + CEILING
    with pytest.raises(WorkerUnhealthy, match="the heartbeat thread died"):
        worker.run(until=lambda: time.monotonic() > give_up, install_signal_handlers=False)
    assert time.monotonic() < give_up  # it stopped by itself, not at the deadline


def test_a_signal_before_run_starts_drains_the_worker_instead_of_raising(caplog):
    """runworkflows installs the handlers first: a Ctrl-C while it starts up (and --reload's watcher with it) drains."""
    import os
    import signal

    handle = slow_steps.run({"steps": 1})
    worker = Worker(concurrency=1, lease="30s", poll_interval="20ms")
    before = signal.getsignal(signal.SIGINT)
    with caplog.at_level("INFO", logger="django_openworkflow.worker"), worker.signals_handled():
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the worker's handler has it
        wait_until(worker._stopping.is_set)  # stopped by the "owf-signals" thread
        worker.run(install_signal_handlers=False)  # returns at once: stopped before it claimed anything
    assert "SIGINT received" in caplog.text
    assert "stopped after 0 slice(s)" in caplog.text
    assert handle.status() == "pending"
    assert signal.getsignal(signal.SIGINT) is before  # the handlers from before, again


def test_the_signal_handler_takes_no_lock_the_main_thread_may_hold():
    """A signal lands between two bytecodes of the main thread, perhaps inside Event.wait() with its lock held.

    The handler used to set the worker's Events itself, and waited for ever
    on that lock: SIGTERM hung the worker instead of draining it.
    """
    import signal

    worker = Worker(concurrency=1, lease="30s", poll_interval="20ms")
    with worker.signals_handled():
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)

        def signal_while_holding_the_locks() -> None:
            with worker._wake._cond, worker._stopping._cond:  # as Event.wait() holds one, briefly
                handler(signal.SIGTERM, None)

        landed = threading.Thread(target=signal_while_holding_the_locks, daemon=True)
        landed.start()
        landed.join(10)
        assert not landed.is_alive(), "the signal handler waited for a lock its own thread holds"
        wait_until(worker._stopping.is_set)


def test_prefetch_holds_runs_ahead_of_its_slots_and_a_stop_hands_them_back():
    """With PREFETCH a worker claims runs for its busy slots; when it stops, those go back at once."""
    handles = [gated_step.run() for _ in range(4)]
    worker = Worker(concurrency=1, prefetch=2, lease="30s", poll_interval="20ms", drain_timeout="60s")

    def held() -> int:
        return WorkflowRun.objects.filter(worker_id=worker.worker_id, status="running").count()

    def one_executing_two_ahead() -> bool:
        with worker._lock:  # what the loop's slot is executing, by its own record
            executing = len(worker._slot_runs)
        return executing == 1 and held() == 3

    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    STEP_GATE.clear()
    thread.start()
    try:
        wait_until(one_executing_two_ahead, timeout=CEILING)
        worker.stop()
        wait_until(lambda: held() == 1, timeout=CEILING)  # the two ahead went back while the slot's step waits
    finally:
        STEP_GATE.set()
        thread.join(60)
    assert not thread.is_alive()
    assert worker.slices_done == 1  # the one executing finished; the two ahead never started
    runs = [WorkflowRun.objects.get(id=h.id) for h in handles]
    assert [run.status for run in runs].count("completed") == 1
    # The others are due now and held by nobody: the next claim, by any worker, takes them.
    handed_back = [run for run in runs if run.status != "completed"]
    assert all(run.worker_id is None and run.available_at <= timezone.now() for run in handed_back)
    assert SideEffect.objects.count() == 1  # nothing ran twice, nothing ran that was handed back


def test_with_prefetch_a_busy_worker_claims_several_runs_at_a_time():
    """Held runs are topped up once half of them have started, not one claim per run that ends."""
    handles = [slow_steps.run({"steps": 1, "pause": 0.01}) for _ in range(30)]
    worker = Worker(concurrency=2, prefetch=4, lease="30s", poll_interval="20ms")
    asked: list[int] = []  # the claim loop's thread only
    claim = worker.store.claim

    def counting_claim(worker_id, limit, *args, **kwargs):  # the real claim, its sizes noted
        asked.append(limit)
        return claim(worker_id, limit, *args, **kwargs)

    worker.store.claim = counting_claim
    give_up = time.monotonic() + CEILING
    worker.run(
        until=lambda: WorkflowRun.objects.finished().count() == 30 or time.monotonic() > give_up,
        install_signal_handlers=False,
    )
    assert all(WorkflowRun.objects.get(id=h.id).status == "completed" for h in handles)
    assert asked[0] == 6  # two slots and four ahead
    assert min(asked) >= 2, asked  # never a claim of one run per run that ended
    assert SideEffect.objects.count() == 30  # each step once


def test_prefetch_must_not_be_negative():
    with pytest.raises(ValueError, match="prefetch must be at least 0"):
        Worker(prefetch=-1)
