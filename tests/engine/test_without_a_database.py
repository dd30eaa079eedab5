"""The engine's unit tests, on the in-memory backend: real workflows, no database at all.

Each test starts runs on an :class:`~django_openworkflow.testing.memory.InMemoryBackend`
and executes them through the engine (``execute_slice``) or the workers'
slice runner (``testing.memory.drain``), then reads the backend's journal.
Time is the backend's :class:`~django_openworkflow.testing.memory.Clock`,
moved forward by the test: sleeps, retries' backoff and wait timeouts pass
at once.

No test here has a ``django_db`` mark, so pytest-django refuses every
query; on top of that, :func:`no_database` fails a test whose code so much
as tried to open a connection (the engine would have turned the refusal
into a released run, which a test might not notice).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from django_openworkflow import NonRetryableError, RetryPolicy, StepFailed, workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.states import RunStatus
from django_openworkflow.testing.memory import Clock, InMemoryBackend, drain, start

LEASE = timedelta(seconds=30)
ONCE = RetryPolicy(maximum_attempts=1)

# What step code did, in order. Parallel members append from their threads: guarded by _calls_lock.
_calls: list[str] = []
_calls_lock = threading.Lock()
# How many times the workflow bodies reached a point (workflow-level retries); the test's thread only.
_bodies: Counter[str] = Counter()
# Set by a step of the fencing tests to run "another worker" while it runs; the slice's thread only.
_during_step: list = []


def called(name: str, value=None):
    """A step's code: note that it ran, return ``value``."""
    with _calls_lock:
        _calls.append(name)
    return value


def calls() -> list[str]:
    with _calls_lock:
        return list(_calls)


def fails_until(name: str, times: int):
    """Step code that fails its first ``times`` executions, then returns ``name``."""
    called(name)
    if calls().count(name) <= times:
        raise RuntimeError(f"{name} is flaky")
    return name


def raises(exc: BaseException):
    raise exc


# -- the workflows ----------------------------------------------------------------------

DECLARED = []


def declare(**options):
    """``@workflow`` for this module: the spec is unregistered when the module's tests are done."""

    def decorate(fn):
        spec = workflow(**options)(fn)
        DECLARED.append(spec)
        return spec

    return decorate


@declare(name="mem-steps")
def steps(ctx):
    one = ctx.step.run("one", lambda: called("one", ctx.input["start"] + 1))
    pair = ctx.step.run("pair", lambda: called("pair", (one, "x")))  # a tuple, read back as JSON: a list
    ctx.step.sleep("nap", "1h")
    two = ctx.step.run("two", lambda: called("two", one * 10))
    return {"one": one, "pair": pair, "two": two}


@declare(name="mem-flaky")
def flaky(ctx):
    policy = RetryPolicy(initial_interval="10s", backoff_coefficient=2, maximum_attempts=3)
    return ctx.step.run("flaky", lambda: fails_until("flaky", ctx.input["fail"]), retry_policy=policy)


@declare(name="mem-fails", step_retry_policy=ONCE)
def fails(ctx):
    ctx.step.run("fine", lambda: called("fine", 1))
    ctx.step.run("boom", lambda: called("boom") or raises(ValueError("kaboom")))
    ctx.step.run("never", lambda: called("never"))


@declare(name="mem-non-retryable")
def non_retryable(ctx):
    ctx.step.run("refused", lambda: called("refused") or raises(NonRetryableError("no")))


@declare(name="mem-workflow-retry", retry_policy=RetryPolicy(initial_interval="5s", maximum_attempts=3))
def workflow_retry(ctx):
    kept = ctx.step.run("kept", lambda: called("kept", "kept"))
    _bodies["after kept"] += 1
    if _bodies["after kept"] < 3:
        raise KeyError("not yet")
    return kept


@declare(name="mem-sleeper")
def sleeper(ctx):
    ctx.step.run("before", lambda: called("before"))
    ctx.step.sleep("nap", ctx.input["duration"])
    return ctx.step.run("after", lambda: called("after", "woke"))


@declare(name="mem-signal")
def waits_for_signal(ctx):
    ctx.step.run("before", lambda: called("before"))
    data = ctx.step.wait_for_signal("approve", timeout="1h")
    return ctx.step.run("after", lambda: called("after", {"approved": data}))


@declare(name="mem-event")
def waits_for_event(ctx):
    payload = ctx.step.wait_for_event("paid", event="payment", match={"order": ctx.input["order"]}, timeout="1d")
    return ctx.step.run("ship", lambda: called("ship", payload))


@declare(name="mem-child")
def child(ctx):
    if ctx.input.get("fail"):
        ctx.step.run("explode", lambda: raises(ValueError("child broke")), retry_policy=ONCE)
    return ctx.step.run("double", lambda: called(f"double {ctx.input['n']}", ctx.input["n"] * 2))


@declare(name="mem-parent")
def parent(ctx):
    ctx.step.run("before", lambda: called("parent before"))
    try:
        value = ctx.step.run_workflow(child, ctx.input)
    except StepFailed as exc:
        return {"failed": exc.step_name, "child_error": (exc.error.get("child_error") or {}).get("message")}
    return ctx.step.run("after", lambda: called("parent after", {"child": value}))


@declare(name="mem-fan-out")
def fan_out(ctx):
    children = [ctx.step.start_workflow(child, {"n": n}, name=f"kid-{n}") for n in range(3)]
    return ctx.step.wait_all(children)


@declare(name="mem-parallel", step_retry_policy=RetryPolicy(initial_interval="1s", maximum_attempts=2))
def parallel(ctx):
    squares = ctx.step.map("sq", lambda i: called(f"sq[{i}]", i * i), range(4))
    pair = ctx.step.parallel(
        [("a", lambda: called("a", "A")), ("flaky", lambda: fails_until("flaky", 1)), ("b", lambda: called("b", "B"))]
    )
    return {"squares": squares, "pair": pair}


# Set by the step-timeout test once it is done, so the abandoned step's thread ends.
_release = threading.Event()


@declare(name="mem-timeout", step_retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="1s"))
def times_out(ctx):
    return ctx.step.run("hang", lambda: called("hang") or _release.wait(30), timeout="100ms")


@declare(name="mem-poller")
def poller(ctx):
    count = ctx.input["count"]
    for _ in range(3):
        count = ctx.step.run("tick", lambda c=count: called("tick", c + 1))
    if count >= ctx.input["until"]:
        return count
    ctx.continue_as_new({"count": count, "until": ctx.input["until"]})


@declare(name="mem-cancel-aware")
def cancel_aware(ctx):
    def cancel_meanwhile():
        seen = [ctx.is_canceled()]
        _during_step.pop()()  # someone cancels the run while this step runs
        seen.append(ctx.is_canceled())
        return called("step", seen)

    ctx.step.run("first", lambda: called("first"))
    ctx.step.run("step", cancel_meanwhile)
    ctx.step.run("after", lambda: called("after"))


@declare(name="mem-saga", compensate_on_cancel=True)
def saga(ctx):
    def b():
        called("b")
        _during_step.pop()()  # someone asks to cancel the run (with compensations) while b runs
        return "b"

    ctx.step.run("a", lambda: called("a", "a"), compensate=lambda out: called(f"undo-{out}"))
    ctx.step.run("b", b, compensate=lambda out: called(f"undo-{out}"))
    ctx.step.run("c", lambda: called("c", "c"), compensate=lambda out: called(f"undo-{out}"))


@declare(name="mem-takeover")
def takeover(ctx):
    def one():
        called("one")
        if _during_step:
            _during_step.pop()()
        return 1

    first = ctx.step.run("one", one)
    return ctx.step.run("two", lambda: called("two", first + 1))


@declare(name="mem-async")
async def async_gather(ctx):
    async def fetch(name):
        await asyncio.sleep(0)
        return called(name, name.upper())

    a, b = await asyncio.gather(ctx.step.run("a", lambda: fetch("a")), ctx.step.run("b", lambda: fetch("b")))
    await ctx.step.sleep("nap", "1m")
    return [a, b]


# -- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _unregister() -> Iterator[None]:
    # Registered again on each set-up: under xdist's worksteal this module's tests can
    # come in several groups on one process, each with its own set-up and teardown.
    for spec in DECLARED:
        registry.register(spec)
    yield
    for spec in DECLARED:
        registry.unregister(spec.name, spec.version)


@pytest.fixture(autouse=True)
def no_database(monkeypatch) -> Iterator[list[str]]:
    """Fail a test whose code tried to reach a database, even if the engine swallowed the refusal.

    Yields the aliases tried so far (a test that tries on purpose empties it).
    """
    tried: list[str] = []  # step threads may try too: guarded by lock
    lock = threading.Lock()
    blocked = BaseDatabaseWrapper.ensure_connection  # pytest-django's refusal, outside django_db tests

    def ensure_connection(self):
        with lock:
            tried.append(self.alias)
        return blocked(self)

    monkeypatch.setattr(BaseDatabaseWrapper, "ensure_connection", ensure_connection)
    yield tried
    with lock:
        assert tried == [], f"the test tried to reach the databases {sorted(set(tried))}"


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    with _calls_lock:
        _calls.clear()
    _bodies.clear()
    _during_step.clear()
    _release.clear()  # set again by the timeout test once it is done
    yield


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def backend(clock) -> InMemoryBackend:
    return InMemoryBackend(clock=clock)


def journal(backend, run_id) -> list[tuple[str, str, str]]:
    return [(a.step_name, a.kind, a.status) for a in backend.load_history(run_id)]


def outcomes(slices) -> list[str]:
    return [str(result.outcome) for result in slices]


def run(backend, run_id):
    found = backend.get_run(run_id)
    assert found is not None
    return found


def claim(backend, worker_id="worker-a"):
    (claimed,) = backend.claim(worker_id, 1, LEASE, ("default",))
    return claimed


# -- no database ------------------------------------------------------------------------


def test_these_tests_may_not_query_a_database(no_database):
    with pytest.raises(RuntimeError, match="Database access not allowed"):
        connections["default"].cursor()
    assert no_database == ["default"]  # and the fixture saw the try
    no_database.clear()


def test_a_whole_run_touches_no_database(backend):
    run_id = start(backend, steps, {"start": 3})
    drain(backend)  # the no_database fixture checks that nothing tried to connect
    assert run(backend, run_id).status == RunStatus.RUNNING  # parked in its sleep, not released by an error


# -- steps and replay -------------------------------------------------------------------


def test_completed_steps_are_never_run_again_on_replay(backend, clock):
    run_id = start(backend, steps, {"start": 3})
    assert outcomes(drain(backend)) == ["parked"]
    assert calls() == ["one", "pair"]
    assert journal(backend, run_id) == [
        ("one", "run", "completed"),
        ("pair", "run", "completed"),
        ("nap", "sleep", "running"),
    ]
    clock.advance("1h")
    assert outcomes(drain(backend)) == ["completed"]
    assert calls() == ["one", "pair", "two"]  # one and pair replayed from the journal
    assert backend.run_outcome(run_id).output == {"one": 4, "pair": [4, "x"], "two": 40}

    # Replaying the finished run from the top (as a new owner would) calls no step's code again.
    with backend.lock:
        row = backend.runs[run_id]
        row.status, row.worker_id, row.available_at = RunStatus.RUNNING, None, backend.now()
    assert outcomes(drain(backend)) == ["completed"]
    assert calls() == ["one", "pair", "two"]
    assert backend.run_outcome(run_id).output == {"one": 4, "pair": [4, "x"], "two": 40}


def test_a_fresh_run_completes_in_one_slice_through_execute_slice(backend):
    run_id = start(backend, takeover)
    result = execute_slice(backend, claim(backend))
    assert result.outcome == Outcome.COMPLETED
    assert backend.run_outcome(run_id).output == 2
    assert journal(backend, run_id) == [("one", "run", "completed"), ("two", "run", "completed")]


# -- retries ----------------------------------------------------------------------------


def test_a_failed_step_is_retried_after_its_backoff(backend, clock):
    run_id = start(backend, flaky, {"fail": 2})
    (first,) = drain(backend)
    assert first.outcome == Outcome.PARKED
    history = backend.load_history(run_id)
    assert [a.status for a in history] == ["failed"]
    assert history[0].error["type"] == "RuntimeError" and history[0].error["message"] == "flaky is flaky"
    due = run(backend, run_id).available_at - backend.now()
    assert timedelta(seconds=9) < due <= timedelta(seconds=10)  # the first backoff: 10 s

    assert drain(backend) == []  # not before its backoff
    clock.advance("10s")
    assert outcomes(drain(backend)) == ["parked"]  # failed again: the next backoff doubles
    clock.advance("19s")
    assert drain(backend) == []
    clock.advance("1s")
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == "flaky"
    assert calls() == ["flaky"] * 3
    assert [status for _, _, status in journal(backend, run_id)] == ["failed", "failed", "completed"]


def test_a_step_whose_retries_are_spent_fails_the_run_naming_it(backend, clock):
    run_id = start(backend, flaky, {"fail": 5})
    drain(backend)
    for wait in ("10s", "20s"):
        clock.advance(wait)
        drain(backend)
    outcome = backend.run_outcome(run_id)
    assert outcome.status == RunStatus.FAILED
    assert outcome.error["type"] == "StepFailed" and outcome.error["step"] == "flaky"
    assert calls() == ["flaky"] * 3


def test_a_step_that_fails_for_good_fails_the_run_and_nothing_after_it_runs(backend):
    run_id = start(backend, fails)
    assert outcomes(drain(backend)) == ["failed"]
    outcome = backend.run_outcome(run_id)
    assert outcome.error["type"] == "StepFailed" and outcome.error["step"] == "boom"
    assert calls() == ["fine", "boom"]
    assert journal(backend, run_id) == [("fine", "run", "completed"), ("boom", "run", "failed")]
    (boom,) = [a for a in backend.load_history(run_id) if a.step_name == "boom"]
    assert boom.error["type"] == "ValueError" and boom.error["message"] == "kaboom"
    assert "Traceback" in boom.error["traceback"]


def test_a_non_retryable_error_fails_the_step_at_once(backend):
    run_id = start(backend, non_retryable)
    assert outcomes(drain(backend)) == ["failed"]  # the default step policy would retry 10 times
    assert calls() == ["refused"]
    assert backend.run_outcome(run_id).status == RunStatus.FAILED


def test_an_error_in_the_body_retries_the_workflow_and_keeps_its_completed_steps(backend, clock):
    run_id = start(backend, workflow_retry)
    assert outcomes(drain(backend)) == ["retry"]
    assert run(backend, run_id).error["type"] == "KeyError"
    clock.advance("5s")
    assert outcomes(drain(backend)) == ["retry"]
    clock.advance("10s")
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == "kept"
    assert calls() == ["kept"]  # run once, replayed by the two retries
    assert run(backend, run_id).attempts == 2 and run(backend, run_id).error is None


# -- sleeps and deadlines ---------------------------------------------------------------


def test_a_sleep_parks_the_run_until_the_clock_reaches_its_end(backend, clock):
    run_id = start(backend, sleeper, {"duration": "1h"})
    (parked,) = drain(backend)
    assert parked.outcome == Outcome.PARKED and parked.wake_at is not None
    row = run(backend, run_id)
    assert row.status == RunStatus.RUNNING and row.worker_id is None
    assert journal(backend, run_id) == [("before", "run", "completed"), ("nap", "sleep", "running")]
    clock.advance("59m")
    assert drain(backend) == []
    # Claimed before its end (made due by something else), it replays to the sleep and parks again.
    with backend.lock:
        backend.runs[run_id].available_at = backend.now()
    (again,) = drain(backend)
    assert again.outcome == Outcome.PARKED and again.wake_at == parked.wake_at
    assert calls() == ["before"]
    clock.advance("1m")
    assert outcomes(drain(backend)) == ["completed"]
    assert journal(backend, run_id)[1:] == [("nap", "sleep", "completed"), ("after", "run", "completed")]
    assert calls() == ["before", "after"] and run(backend, run_id).attempts == 0


def test_a_sleep_past_the_deadline_fails_the_run_now(backend):
    run_id = start(backend, sleeper, {"duration": "1h"}, deadline="30s")
    assert outcomes(drain(backend)) == ["failed"]
    outcome = backend.run_outcome(run_id)
    assert outcome.error["type"] == "DeadlineExceeded" and outcome.error["step"] == "nap"


# -- signals and events -----------------------------------------------------------------


def test_a_signal_sent_to_a_waiting_run_wakes_it_with_its_data(backend):
    run_id = start(backend, waits_for_signal)
    assert outcomes(drain(backend)) == ["parked"]
    assert journal(backend, run_id)[-1] == ("approve", "signal", "running")
    assert backend.send_signal(run_id, "approve", {"by": "ada"}, None) is True  # delivered to the open wait
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == {"approved": {"by": "ada"}}
    assert calls() == ["before", "after"]


def test_a_signal_sent_before_the_wait_is_buffered_then_taken(backend):
    run_id = start(backend, waits_for_signal)
    assert backend.send_signal(run_id, "approve", "early", None) is False  # buffered
    assert outcomes(drain(backend)) == ["completed"]  # the wait took it: no park
    assert backend.run_outcome(run_id).output == {"approved": "early"}


def test_a_wait_that_times_out_returns_none_and_a_late_signal_stays_buffered(backend, clock):
    run_id = start(backend, waits_for_signal)
    drain(backend)
    clock.advance("1h")
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == {"approved": None}
    assert journal(backend, run_id)[1] == ("approve", "signal", "completed")
    with pytest.raises(Exception, match="signals can only be sent to unfinished runs"):
        backend.send_signal(run_id, "approve", "late", None)


def test_an_event_wakes_only_the_runs_whose_pattern_its_payload_contains(backend):
    seven, eight = start(backend, waits_for_event, {"order": 7}), start(backend, waits_for_event, {"order": 8})
    assert outcomes(drain(backend)) == ["parked", "parked"]
    assert backend.send_event("payment", {"order": 9}, None) == 0
    assert drain(backend) == []
    assert backend.send_event("payment", {"order": 7, "amount": 30}, None) == 1
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(seven).output == {"order": 7, "amount": 30}
    assert backend.run_outcome(eight).status == RunStatus.RUNNING


# -- children ---------------------------------------------------------------------------


def test_run_workflow_starts_the_child_once_and_the_parent_wakes_with_its_output(backend):
    parent_id = start(backend, parent, {"n": 21})
    slices = drain(backend)
    # The parent parks, the child (due at once) completes and wakes it, the parent completes.
    assert [(r.workflow_name, str(r.outcome)) for r in slices] == [
        ("mem-parent", "parked"),
        ("mem-child", "completed"),
        ("mem-parent", "completed"),
    ]
    assert backend.run_outcome(parent_id).output == {"child": 42}
    (child_id,) = backend.child_run_ids(parent_id)
    assert backend.parent_run_id(child_id) == parent_id
    assert calls() == ["parent before", "double 21", "parent after"]  # "before" was not run again
    wait = [a for a in backend.load_history(parent_id) if a.kind == "workflow"]
    assert [(a.step_name, a.status, a.output, a.child_workflow_run_id) for a in wait] == [
        ("mem-child", "completed", 42, child_id)
    ]


def test_a_failed_child_raises_step_failed_in_the_parent(backend):
    parent_id = start(backend, parent, {"n": 1, "fail": True})
    drain(backend)
    output = backend.run_outcome(parent_id).output
    assert output["failed"] == "mem-child" and "child broke" in output["child_error"]
    assert "parent after" not in calls()


def test_start_workflow_and_wait_all_collect_the_children_in_order(backend):
    parent_id = start(backend, fan_out)
    drain(backend)
    assert backend.run_outcome(parent_id).output == [0, 2, 4]
    assert len(backend.child_run_ids(parent_id)) == 3
    assert sorted(calls()) == ["double 0", "double 1", "double 2"]  # each child's step once
    assert [name for name, _, _ in journal(backend, parent_id)] == ["kid-0", "kid-1", "kid-2"]


# -- parallel steps, map, timeouts ------------------------------------------------------


def test_parallel_and_map_run_every_member_once_and_retry_only_the_failed_one(backend, clock):
    run_id = start(backend, parallel)
    assert outcomes(drain(backend)) == ["parked"]  # flaky failed once: the run waits for its retry
    assert Counter(calls()) == Counter(["sq[0]", "sq[1]", "sq[2]", "sq[3]", "a", "flaky", "b"])
    clock.advance("1s")
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == {"squares": [0, 1, 4, 9], "pair": ["A", "flaky", "B"]}
    assert Counter(calls()) == Counter(["sq[0]", "sq[1]", "sq[2]", "sq[3]", "a", "flaky", "b", "flaky"])
    names = [name for name, _, status in journal(backend, run_id) if status == "completed"]
    assert names[:4] == ["sq[0]", "sq[1]", "sq[2]", "sq[3]"] and sorted(names[4:]) == ["a", "b", "flaky"]


def test_a_step_that_overruns_its_timeout_fails_with_step_timeout(backend, clock):
    run_id = start(backend, times_out)
    try:
        assert outcomes(drain(backend)) == ["parked"]  # the first attempt timed out; one retry left
        clock.advance("1s")
        assert outcomes(drain(backend)) == ["failed"]
    finally:
        _release.set()  # the abandoned attempts' threads end
    outcome = backend.run_outcome(run_id)
    assert outcome.error["step"] == "hang" and "StepTimeout" in outcome.error["message"]
    assert "timeout of 0.1s" in outcome.error["message"]
    history = backend.load_history(run_id)
    assert [a.error["type"] for a in history] == ["StepTimeout"] * 2
    assert calls() == ["hang", "hang"]


# -- continue-as-new ----------------------------------------------------------------------


def test_continue_as_new_hands_over_to_a_fresh_run_with_an_empty_journal(backend):
    first = start(backend, poller, {"count": 0, "until": 6})
    assert outcomes(drain(backend)) == ["continued", "completed"]  # the successor is due at once
    second = backend.successor_id(first)
    assert second is not None and backend.successor_id(second) is None
    assert backend.run_outcome(first).status == RunStatus.CONTINUED
    assert backend.run_outcome(second).output == 6
    assert run(backend, second).input == {"count": 3, "until": 6}
    assert run(backend, second).continued_from_id == first
    assert [name for name, _, _ in journal(backend, second)] == ["tick", "tick:1", "tick:2"]
    assert calls() == ["tick"] * 6


# -- cancel -------------------------------------------------------------------------------


def test_a_run_canceled_while_a_step_runs_writes_nothing_more(backend):
    run_id = start(backend, cancel_aware)
    _during_step.append(lambda: backend.cancel_run(run_id))
    result = execute_slice(backend, claim(backend))
    assert result.outcome == Outcome.LEASE_LOST  # the next write found the run canceled
    assert backend.run_outcome(run_id).status == RunStatus.CANCELED
    assert calls() == ["first", "step"]  # "after" never ran
    # The step saw the cancel; its completion, refused by the fence, never landed.
    assert journal(backend, run_id) == [("first", "run", "completed"), ("step", "run", "failed")]


def test_a_cancel_asked_during_a_step_runs_the_compensations_then_ends_canceled(backend):
    run_id = start(backend, saga)
    _during_step.append(lambda: backend.request_cancel([run_id]))
    assert outcomes(drain(backend)) == ["canceled"]
    outcome = backend.run_outcome(run_id)
    assert outcome.status == RunStatus.CANCELED and outcome.error["type"] == "Canceled"
    assert calls() == ["a", "b", "undo-b", "undo-a"]  # b finished, so it is undone; c never started
    assert [(name, status) for name, _, status in journal(backend, run_id)] == [
        ("a", "completed"),
        ("b", "completed"),
        ("compensate:b", "completed"),
        ("compensate:a", "completed"),
    ]


def test_a_parked_run_that_is_canceled_is_never_resumed(backend, clock):
    run_id = start(backend, sleeper, {"duration": "1h"})
    drain(backend)
    assert backend.cancel_run(run_id) is True
    clock.advance("2h")
    assert drain(backend) == []
    assert backend.run_outcome(run_id).status == RunStatus.CANCELED
    assert journal(backend, run_id)[-1] == ("nap", "sleep", "failed")
    assert calls() == ["before"]


# -- leases: fencing --------------------------------------------------------------------


def test_a_worker_that_lost_its_lease_mid_step_writes_nothing_and_the_new_holder_finishes(backend):
    run_id = start(backend, takeover)
    claimed_a = claim(backend, "worker-a")
    stolen = []

    def lease_runs_out_and_worker_b_claims():
        with backend.lock:
            backend.runs[run_id].available_at = backend.now() - timedelta(seconds=1)
        stolen.append(claim(backend, "worker-b"))

    _during_step.append(lease_runs_out_and_worker_b_claims)
    assert execute_slice(backend, claimed_a).outcome == Outcome.LEASE_LOST
    row = run(backend, run_id)
    assert (row.worker_id, row.status, row.output) == ("worker-b", RunStatus.RUNNING, None)
    assert journal(backend, run_id) == []  # A's completion of "one" and start of "two" never landed

    (claimed_b,) = stolen
    assert claimed_b.lease_expired
    assert execute_slice(backend, claimed_b).outcome == Outcome.COMPLETED
    assert backend.run_outcome(run_id).output == 2
    # B charged A's death to the step A was in, then ran it again.
    history = backend.load_history(run_id)
    assert [(a.step_name, a.status) for a in history] == [("one", "failed"), ("one", "completed"), ("two", "completed")]
    assert history[0].error["type"] == "LeaseExpired"
    assert calls() == ["one", "one", "two"]


def test_a_lease_the_caller_could_not_renew_hands_the_run_back_before_any_step(backend):
    run_id = start(backend, takeover)
    result = execute_slice(backend, claim(backend), lease_valid=lambda: False)
    assert result.outcome == Outcome.LEASE_LOST and "could not be renewed" in result.detail
    row = run(backend, run_id)
    assert row.worker_id is None and row.available_at <= backend.now()  # due again at once
    assert calls() == [] and journal(backend, run_id) == []


# -- determinism --------------------------------------------------------------------------


def test_a_step_name_reused_for_another_kind_of_step_is_a_determinism_error(backend, clock):
    name = "mem-changed-code"

    def deployed_first(ctx):
        ctx.step.run("validate", lambda: called("validate", True))
        ctx.step.sleep("cool-off", "1h")
        return "done"

    def deployed_next(ctx):
        # The code changed under the running run: "validate" is now the name of a wait for a signal.
        ctx.step.wait_for_signal("validate", timeout="1h")
        ctx.step.sleep("cool-off", "1h")
        return "done"

    first = workflow(name=name)(deployed_first)
    try:
        run_id = start(backend, first)
        assert outcomes(drain(backend)) == ["parked"]
        registry.unregister(name, None)
        workflow(name=name)(deployed_next)
        clock.advance("1h")
        assert outcomes(drain(backend)) == ["failed"]
    finally:
        registry.unregister(name, None)
    outcome = backend.run_outcome(run_id)
    assert outcome.error["type"] == "DeterminismError"
    assert outcome.error["step"] == "validate"
    assert "'validate'" in outcome.error["message"] and "'run'" in outcome.error["message"]
    assert "'signal'" in outcome.error["message"]


# -- async workflows ----------------------------------------------------------------------


def test_an_async_workflow_replays_its_steps_after_a_sleep(backend, clock):
    run_id = start(backend, async_gather)
    assert outcomes(drain(backend)) == ["parked"]
    clock.advance("1m")
    assert outcomes(drain(backend)) == ["completed"]
    assert backend.run_outcome(run_id).output == ["A", "B"]
    assert sorted(calls()) == ["a", "b"]  # each once: replayed after the sleep
