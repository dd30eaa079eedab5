"""The real worker loop (``Worker``: claims, slot threads, prefetch, heartbeats, drain) on the in-memory store.

``Worker(store=InMemoryBackend())`` runs the same loop as ``runworkflows``
with no database at all, so what these tests check is the loop's own logic,
once per CI run, and each waits for the state it needs (a gate the test opens,
never a pause). The database's side of the same loop is tests/worker/test_runner.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.db.backends.base.base import BaseDatabaseWrapper

from django_openworkflow import RetryPolicy, workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.states import RunStatus
from django_openworkflow.testing.memory import InMemoryBackend, start
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING, wait_until

# What the workflows' steps did: run ids in the order their step ran. Slot threads append: guarded by _lock.
_ran: list[str] = []
_lock = threading.Lock()
# Opened by the test: a gated step waits for it (with a ceiling, so a failing test cannot hang a slot).
_gate = threading.Event()


@workflow(name="loop-mem-one-step")
def one_step(ctx):
    return ctx.step.run("only", lambda: _note(ctx))


@workflow(name="loop-mem-flaky")
def flaky(ctx):
    """Its step fails on its first attempt and succeeds on the second."""
    return ctx.step.run("charge", lambda: _fail_once(ctx), retry_policy=RetryPolicy(initial_interval="10ms"))


def _fail_once(ctx) -> str:
    with _lock:
        first = str(ctx.run_id) not in _ran
        _ran.append(str(ctx.run_id))
    if first:
        raise ValueError("card declined")
    return "charged"


@workflow(name="loop-mem-gated")
def gated(ctx):
    return ctx.step.run("gated", lambda: (_gate.wait(60), _note(ctx))[1])


def _note(ctx) -> str:
    with _lock:
        _ran.append(str(ctx.run_id))
    return "done"


def ran() -> list[str]:
    with _lock:
        return list(_ran)


@pytest.fixture(autouse=True)
def _workflows_and_no_database(monkeypatch) -> Iterator[None]:
    for spec in (one_step, gated, flaky):
        if registry.get(spec.name, spec.version) is None:
            registry.register(spec)
    with _lock:
        _ran.clear()
    _gate.clear()
    tried: list[str] = []  # slot threads may try too: list.append is atomic

    def ensure_connection(self):  # pytest-django refuses anyway; this says which alias was tried
        tried.append(self.alias)
        raise AssertionError(f"the worker loop on the in-memory store reached the database {self.alias!r}")

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", ensure_connection)
    yield
    _gate.set()  # a failed test's gated slots end
    for spec in (one_step, gated, flaky):
        registry.unregister(spec.name, spec.version)
    assert tried == [], f"the worker loop reached the databases {sorted(set(tried))}"


def statuses(store: InMemoryBackend, run_ids) -> list[str]:
    with store.lock:
        return [store.runs[run_id].status for run_id in run_ids]


def run_in_thread(worker: Worker, until: Callable[[], bool] | None = None) -> threading.Thread:
    """``worker.run(until)`` on a thread of its own; what it raised is re-raised by ``join_worker``."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            worker.run(until=until, install_signal_handlers=False)
        except BaseException as exc:  # noqa: BLE001 (re-raised on the test's thread)
            errors.append(exc)

    thread = threading.Thread(target=target, name="test-worker")
    thread.errors = errors  # type: ignore[attr-defined]
    thread.start()
    return thread


def join_worker(thread: threading.Thread) -> None:
    thread.join(60)
    assert not thread.is_alive(), "the worker did not stop within 60 s"
    assert not thread.errors, thread.errors  # type: ignore[attr-defined]


def test_a_burst_worker_executes_every_run_once_and_stops() -> None:
    store = InMemoryBackend()
    run_ids = [start(store, one_step, {"n": i}) for i in range(25)]
    worker = Worker(store=store, burst=True, concurrency=4, poll_interval="10ms", lease="30s")
    worker.run(install_signal_handlers=False)
    assert statuses(store, run_ids) == [RunStatus.COMPLETED] * 25
    assert sorted(ran()) == sorted(str(run_id) for run_id in run_ids)  # each step once
    assert worker.slices_done == 25


def test_prefetch_holds_runs_ahead_of_its_slots_and_a_stop_hands_them_back() -> None:
    """One slot executing, two claimed ahead; at the stop those two go back at once, never started."""
    store = InMemoryBackend()
    run_ids = [start(store, gated) for _ in range(4)]
    worker = Worker(store=store, concurrency=1, prefetch=2, lease="30s", poll_interval="10ms", drain_timeout="60s")

    def held() -> int:
        with store.lock:
            return sum(run.worker_id == worker.worker_id for run in store.runs.values())

    def one_executing_two_ahead() -> bool:
        with worker._lock:  # the loop's own record of what its slot is executing
            executing = len(worker._slot_runs)
        return executing == 1 and held() == 3

    thread = run_in_thread(worker)
    wait_until(one_executing_two_ahead, timeout=CEILING)
    worker.stop()
    # The two held ahead go back before the slot's run ends: the gate is still shut.
    wait_until(lambda: held() == 1, timeout=CEILING)
    assert ran() == []
    _gate.set()
    join_worker(thread)
    assert worker.slices_done == 1
    done = statuses(store, run_ids)
    assert done.count(RunStatus.COMPLETED) == 1 and len(ran()) == 1
    with store.lock:
        handed_back = [store.runs[run_id] for run_id in run_ids if store.runs[run_id].status != RunStatus.COMPLETED]
        assert all(run.worker_id is None and run.available_at <= store.now() for run in handed_back)


def test_with_prefetch_a_busy_worker_claims_several_runs_at_a_time() -> None:
    """Held runs are topped up once half of them have started, not one claim per run that ends."""
    store = InMemoryBackend()
    run_ids = [start(store, one_step, {"n": i}) for i in range(30)]
    worker = Worker(store=store, burst=True, concurrency=2, prefetch=4, lease="30s", poll_interval="10ms")
    asked: list[int] = []  # the claim loop's thread only
    claim = store.claim

    def counting_claim(worker_id, limit, *args, **kwargs):  # the real claim, its sizes noted
        asked.append(limit)
        return claim(worker_id, limit, *args, **kwargs)

    store.claim = counting_claim  # type: ignore[method-assign]
    worker.run(install_signal_handlers=False)
    assert statuses(store, run_ids) == [RunStatus.COMPLETED] * 30
    assert asked[0] == 6  # two slots and four ahead
    assert min(asked) >= 2, asked  # never a claim of one run per run that ended
    assert len(ran()) == 30  # each step once


def test_heartbeats_keep_a_slow_run_leased_past_its_lease() -> None:
    """A step that outlasts the lease: the supervisor renews it, and no other worker can claim the run."""
    store = InMemoryBackend()
    run_id = start(store, gated)
    worker = Worker(store=store, concurrency=1, lease="1s", poll_interval="10ms", drain_timeout="60s")
    thread = run_in_thread(worker)

    def lease_ends():  # a claimed run is due again when its lease ends: available_at
        with store.lock:
            run = store.runs[run_id]
            return run.available_at if run.worker_id == worker.worker_id else None

    wait_until(lambda: lease_ends() is not None, timeout=CEILING)
    first = lease_ends()
    wait_until(lambda: lease_ends() > first + timedelta(milliseconds=500), timeout=CEILING)  # renewed
    assert store.claim("another-worker", 1, timedelta(seconds=30), [gated.queue]) == []
    _gate.set()
    wait_until(lambda: statuses(store, [run_id]) == [RunStatus.COMPLETED], timeout=CEILING)
    worker.stop()
    join_worker(thread)
    assert ran() == [str(run_id)]


def test_a_stop_while_idle_wakes_the_loop_and_it_returns() -> None:
    store = InMemoryBackend()
    worker = Worker(store=store, concurrency=2, poll_interval="1h")  # only the stop can end its wait
    claims: list[int] = []  # the claim loop's thread appends; list.append is atomic
    claim = store.claim

    def counting_claim(*args, **kwargs):
        claims.append(1)
        return claim(*args, **kwargs)

    store.claim = counting_claim  # type: ignore[method-assign]
    thread = run_in_thread(worker)
    wait_until(lambda: len(claims) >= 1, timeout=CEILING)  # idle: claimed nothing, waiting an hour to look again
    worker.stop()
    join_worker(thread)  # returned within 60 s: the stop woke the loop out of its hour's wait
    assert worker.slices_done == 0


def test_a_retried_step_is_logged_at_info_with_its_error_and_next_attempt(caplog) -> None:
    store = InMemoryBackend()
    run_id = start(store, flaky)
    worker = Worker(store=store, lease="30s", poll_interval="10ms")
    with caplog.at_level(logging.INFO, logger="django_openworkflow.worker"):
        join_worker(run_in_thread(worker, until=lambda: statuses(store, [run_id]) == [RunStatus.COMPLETED]))
    retried = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(retried) == 1 and retried[0].levelno == logging.INFO
    assert retried[0].getMessage().startswith(
        f"run {run_id} (loop-mem-flaky) parked; this slice took "
    ) and "step 'charge' failed (attempt 1 of 10, ValueError: card declined); next attempt at 20" in (
        retried[0].getMessage()
    )


def test_a_run_taken_back_after_a_lost_lease_is_logged_with_the_worker_that_lost_it(caplog) -> None:
    store = InMemoryBackend()
    run_id = start(store, one_step)
    (lost,) = store.claim("gone-worker", 1, timedelta(0), ("default",))  # its lease ends as it starts
    assert lost.run.id == run_id
    worker = Worker(store=store, lease="30s", poll_interval="10ms")
    with caplog.at_level(logging.INFO, logger="django_openworkflow.worker"):
        join_worker(run_in_thread(worker, until=lambda: statuses(store, [run_id]) == [RunStatus.COMPLETED]))
    (taken,) = [r for r in caplog.records if "taken back" in r.getMessage()]
    assert taken.levelno == logging.WARNING
    assert taken.getMessage().startswith(
        f"run {run_id} (loop-mem-one-step) taken back from worker gone-worker, whose lease had run out "
    )


def test_a_taken_back_run_whose_lease_end_cannot_be_read_is_still_claimed_and_logged(caplog) -> None:
    """SQLite's claim reads the lease end as text: text that does not parse leaves out the 'how long ago'."""
    from django_openworkflow.store.queue import Candidate
    from django_openworkflow.store.records import TakenFrom
    from django_openworkflow.worker.runner import SliceRunner

    store = InMemoryBackend()
    run_id = start(store, one_step)
    (first,) = store.claim("gone-worker", 1, timedelta(0), ("default",))
    claimed = Candidate(run_id, "2026-01-01", "gone-worker", "running", available_at="not a time").claimed(
        "w2", first.run, store.now()
    )
    assert claimed.taken_from == TakenFrom("gone-worker", None) and claimed.lease_expired
    with caplog.at_level(logging.WARNING, logger="test-runner"):
        SliceRunner(store, logging.getLogger("test-runner")).run(claimed, lambda: True)
    assert [r.getMessage() for r in caplog.records if "taken back" in r.getMessage()] == [
        f"run {run_id} (loop-mem-one-step) taken back from worker gone-worker, whose lease had run out before"
    ]
