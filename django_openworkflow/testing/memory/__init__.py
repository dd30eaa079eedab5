"""An in-memory store backend: every store operation on plain Python structures, no database at all.

What it is for: the engine's unit tests, and other fast tests that need a
store but not a database. :class:`InMemoryBackend` has the public operations
of :class:`~django_openworkflow.store.backends.base.Backend` that the engine,
the slice runner, the worker loop, the client and the backend conformance
suite (``tests/store/test_conformance.py``) call -- claims and leases,
fenced journal writes, history, children, idempotent starts, signals,
events, approvals and human tasks, the clock -- and returns the same records (``store/records.py``).
The conformance suite runs every test on it as well as on the database, so
it keeps the same promises: a worker that lost its run gets ``LeaseLost``
and writes nothing, values round-trip as JSON, keys compare byte for byte,
event patterns match with PostgreSQL's containment rules.

It is modeled on procrastinate's ``InMemoryConnector``: the tables are
dicts of rows (:class:`RunRow`, :class:`AttemptRow`, :class:`SignalRow`,
:class:`EventRow`, :class:`ApprovalRow`, with the models' field names) that a test may read
under :attr:`InMemoryBackend.lock` to check or set up state.

What it does not do: share anything across processes (each instance is
its own store, for one process), wake workers with LISTEN/NOTIFY
(:meth:`~InMemoryBackend.listener` is None: workers poll), answer the
ORM-based pages (the admin, the CLI's listings, pruning, the dashboard,
which query the models), or be returned by ``get_backend()``: pass it to
what you test. Every operation holds one lock for its whole length, so
concurrent threads see each operation as one transaction, serialized.

Its operations are grouped as the database backends' are: ``queue.py``
(claims, leases), ``journal.py`` (history, fenced writes), ``runs.py``
(starts, cancels, wakes, retries), ``messages.py`` (signals, events) and
``approvals.py`` (approvals and tasks, decided once),
each a mixin over ``core.py`` (the tables of ``rows.py``, the lock, the
clock and the fence).

To run workflows on it (``tests/engine/test_without_a_database.py`` does):
:class:`Clock`, a clock a test moves forward (sleeps, retries' backoff,
wait timeouts); :func:`start`, a run's start; :func:`drain`, which executes
every due run through the workers' slice runner until none is due.
"""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...definitions.flow import DEFAULT_QUEUE
from ...definitions.payload import to_json_value
from ...durations import Duration, parse_duration
from .approvals import ApprovalOps
from .journal import JournalOps
from .queue import QueueOps
from .rows import ApprovalRow, AttemptRow, EventRow, RunRow, SignalRow

if TYPE_CHECKING:
    from ...definitions.registry import WorkflowSpec
    from ...engine.execute import SliceResult

__all__ = [
    "ApprovalRow",
    "AttemptRow",
    "Clock",
    "EventRow",
    "InMemoryBackend",
    "RunRow",
    "SignalRow",
    "drain",
    "start",
]


class InMemoryBackend(QueueOps, JournalOps, ApprovalOps):
    """The store's operations on dicts of rows, for tests that need no database (see the module's docstring).

    Thread safety: see :class:`~django_openworkflow.testing.memory.core.MemoryCore`; every
    table is guarded by :attr:`lock`, held by each operation from start to end.
    """

    display_name = "in-memory"
    alias = "memory"
    #: No workers' table: a Worker on this store keeps no heartbeat row (worker/presence.py's Unlisted).
    keeps_worker_rows = False


# -- driving runs on an in-memory backend: a clock to move, a start, a drain --


class Clock:
    """This process's clock, moved forward by :meth:`advance`: pass it as ``InMemoryBackend(clock=...)``.

    It keeps running with real time between moves, as the engine expects:
    within a slice the engine reads the time as the claim's timestamp plus
    the time elapsed since (``ClaimedRun.clock``), so a run that sleeps for
    an hour is due once the clock was advanced by an hour, not a moment
    later. Thread safety: the offset is guarded by a lock (the engine's
    step threads and the test's thread read the clock).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offset = timedelta(0)  # guarded by _lock

    def __call__(self) -> datetime:
        with self._lock:
            offset = self._offset
        return datetime.now(UTC) + offset

    def advance(self, duration: Duration) -> datetime:
        """Move the clock forward by ``duration`` (``"1h"``, seconds, a timedelta); returns the new time."""
        delta = parse_duration(duration)
        if delta < timedelta(0):
            raise ValueError(f"a clock moves forward only, got {duration!r}")
        with self._lock:
            self._offset += delta
        return self()


def start(
    backend: InMemoryBackend,
    workflow: WorkflowSpec,
    input: Any = None,
    *,
    deadline: Duration | None = None,
    idempotency_key: str | None = None,
) -> uuid.UUID:
    """Start a run of ``workflow`` (its spec from ``@workflow``) on ``backend``, due now; its id.

    ``spec.run()`` starts runs on the workflow database; this is the start
    for an in-memory backend: the input must be JSON, the run gets the
    workflow's queue, priority and limits, and ``deadline`` (a duration from
    the backend's clock) bounds it.
    """
    value = to_json_value(input, f"input of workflow {workflow.name!r}", "input")
    deadline_at = None if deadline is None else backend.now() + parse_duration(deadline)
    started, _ = backend.insert_run(
        workflow_name=workflow.name,
        version=workflow.version,
        input=value,
        available_at=None,
        deadline_at=deadline_at,
        idempotency_key=idempotency_key,
        flow=workflow.flow_fields(value),
    )
    return started.id


DRAIN_LIMIT = 1_000
"""Slices one :func:`drain` executes at most: more means some run keeps coming due."""


def drain(
    backend: InMemoryBackend,
    *,
    worker_id: str = "memory-worker",
    lease: timedelta | None = None,
    limit: int = DRAIN_LIMIT,
) -> list[SliceResult]:
    """Execute every due run of ``backend`` on this thread, a slice at a time, until none is due; the slices.

    Each run is claimed as a worker claims it (highest priority first, then
    oldest, from every queue; a fair queue too, where workers take turns per
    key) for ``worker_id``, with ``lease`` (default
    ``OPENWORKFLOW["LEASE"]``), and executed through the
    :class:`~django_openworkflow.worker.runner.SliceRunner` the workers use,
    with a lease that always holds. Children and successors are due at once,
    so they are executed too, and a parent they wake after them.

    Time does not move: a run that sleeps, backs off before a retry or waits
    stays parked. Move the backend's :class:`Clock` (or send the signal) and
    drain again::

        clock = Clock()
        backend = InMemoryBackend(clock=clock)
        run_id = start(backend, onboard_user, {"email": "ada@example.com"})
        drain(backend)                 # runs up to the sleep of a day
        clock.advance("1d")
        drain(backend)                 # and on to the end
        assert backend.run_outcome(run_id).status == "completed"

    Raises :class:`~django_openworkflow.testing.DrainError` after ``limit``
    slices. No database is touched: the in-memory backend is the only store.
    """
    from ...conf import owf_settings
    from ...engine.watchdog import watchdog
    from ...worker.runner import SliceRunner
    from .. import DrainError

    runner = SliceRunner(backend, logging.getLogger("django_openworkflow.testing"))
    held_for = owf_settings.lease if lease is None else lease
    done: list[SliceResult] = []
    # Like testing.drain: no watchdog thread writes a slow step's start meanwhile, so journals do not
    # depend on how long steps took.
    with watchdog.off_on_this_thread():
        while True:
            with backend.lock:
                queues = sorted({run.queue for run in backend.runs.values() if run.is_claimable}) or [DEFAULT_QUEUE]
            claimed = backend.claim(worker_id, 1, held_for, queues)
            if not claimed:
                return done
            if len(done) >= limit:
                raise DrainError(f"{limit} slices executed and runs are still due (a loop that never ends?)")
            done.append(runner.run(claimed[0], _always))


def _always() -> bool:
    return True
