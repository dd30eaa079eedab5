"""What every dispatcher does with a run it claimed: keep its lease, execute a slice, release it, log.

``runworkflows`` slots and the Celery task both run slices through a
:class:`SliceRunner` and keep leases with a :class:`LeaseKeeper`, so the
lease arithmetic, the release after a transient database error and the
log lines exist once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections

from .. import hooks, tracing
from ..engine.execute import Outcome, SliceResult, execute_slice
from ..store.interface import WorkerStore
from ..store.records import ClaimedRun

TRANSIENT_BACKOFF = (0.1, 5.0)
"""Seconds before a run released after a transient database error is due again: first, and at most."""

LEASE_SAFETY = 0.9
"""No step starts in the last tenth of a lease that could not be renewed."""


def recycle_connections() -> None:
    """Between slices: drop this thread's connections that broke or aged out.

    ``CONN_MAX_AGE = 0`` means "per request" to Django; a worker has no
    requests, so it keeps such connections open and replaces them only when
    they fail. A positive ``CONN_MAX_AGE`` is honoured.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.settings_dict.get("CONN_MAX_AGE") == 0 and not conn.errors_occurred:
            continue
        conn.close_if_unusable_or_obsolete()


def backoff(count: int) -> float:
    """Seconds to wait after ``count`` failures in a row (1, 2, 3 ...): doubling, capped."""
    first, most = TRANSIENT_BACKOFF
    return float(min(first * 2 ** (count - 1), most))


class LeaseKeeper:
    """Renews the leases a worker id holds, one UPDATE at a time, and says whether a lease still holds.

    A run's lease runs from its claim or from the last renewal that
    succeeded; once renewals fail for most of a lease, ``lease_valid`` says
    no and the engine starts no further step.

    Threads: one thread calls :meth:`renew` (the worker's heartbeat, or a
    Celery task's); the engine's ``lease_valid`` callables run on slot
    threads. They share no container: ``renew`` is handed the claimed runs
    themselves and sets flags on them (one attribute store each, never
    unset), and ``renewed_at`` and ``renewals`` are written by the renewing
    thread only (rebinding an attribute is atomic).
    """

    def __init__(self, store: WorkerStore, worker_id: str, lease: timedelta) -> None:
        self.store = store
        self.worker_id = worker_id
        self.lease = lease
        self.interval = lease / 3
        self.window = lease.total_seconds() * LEASE_SAFETY
        self.renewed_at = time.monotonic()
        self.renewals = 0  # renewals that extended at least one lease

    def renew(self, claimed_runs: Iterable[ClaimedRun]) -> int | None:
        """Extend the leases of ``claimed_runs``; returns how many are still held, or None if the database failed.

        Flags the runs themselves, not whatever holds their id by now: a run
        that was released and claimed again meanwhile is another ClaimedRun.
        """
        started = time.monotonic()
        by_id = {claimed.run.id: claimed for claimed in claimed_runs}
        if not by_id:
            self.renewed_at = started
            return 0
        held = list(by_id)
        try:
            renewed = self.store.extend_leases(self.worker_id, self.lease, held)
            canceling = self.store.cancel_requested_among(held)
            # A run this worker no longer holds (taken over after a freeze, canceled, finished)
            # must not read as held just because the heartbeat works again.
            lost = set(held) - self.store.held_among(self.worker_id, held) if renewed < len(held) else set()
        except DatabaseError as exc:
            # Loud: from here, the runs' steps may end up running twice (guarantees.md).
            left = self.window - (time.monotonic() - self.renewed_at)
            logging.getLogger("django_openworkflow.worker").error(
                "heartbeat failed: could not renew the leases of %d run(s) (%s); unless a renewal succeeds "
                "within %.1fs, no further step of theirs starts here, and once their leases run out other "
                "workers take them over and run the steps in progress again",
                len(held),
                exc,
                max(0.0, left),
            )
            recycle_connections()
            return None
        self.renewed_at = started
        if renewed:
            self.renewals += 1
        for run_id in canceling:  # a cancel that waits for compensations: the slice stops before its next step
            by_id[run_id].cancel_requested = True
        for run_id in lost:
            by_id[run_id].lease_lost = True
        return renewed

    def lease_valid(self, claimed: ClaimedRun) -> Callable[[], bool]:
        """For the engine: whether ``claimed``'s lease is still known to be held."""
        return lambda: self.holds(claimed)

    def holds(self, claimed: ClaimedRun) -> bool:
        """Whether ``claimed``'s lease is still known to be held: not found lost, and renewed in time."""
        return not claimed.lease_lost and not self.lapsed(claimed)

    def lapsed(self, claimed: ClaimedRun) -> bool:
        """Whether this keeper failed to renew ``claimed``'s lease in time (within most of a lease)."""
        return time.monotonic() >= max(claimed.claimed_monotonic, self.renewed_at) + self.window


class SliceRunner:
    """Executes slices of claimed runs and logs them; hands a run back after a transient database error.

    Transient means the connection or a lock (the engine itself handles
    everything else): the run is released, due again after a backoff that
    doubles with each such release in a row.
    """

    def __init__(self, store: WorkerStore, logger: logging.Logger) -> None:
        self.store = store
        self.logger = logger
        # One SliceRunner serves every slot thread (and every Celery task of a process).
        self._releases: dict[Any, int] = {}  # transient releases in a row, per run; guarded by _lock
        self._lock = threading.Lock()

    def run(self, claimed: ClaimedRun, lease_valid: Callable[[], bool]) -> SliceResult:
        run = claimed.run
        if claimed.fresh:
            self.logger.info("run %s (%s) started", run.id, run.workflow_name)
            hooks.send(hooks.run_started, run.workflow_name, run_id=run.id, queue=run.queue)
        elif claimed.taken_from is not None:
            taken = claimed.taken_from
            ended = taken.lease_ended_at
            ago = "" if ended is None else f" {(claimed.claimed_at - ended).total_seconds():.1f}s"
            self.logger.warning(
                "run %s (%s) taken back from worker %s, whose lease had run out%s before",
                run.id,
                run.workflow_name,
                taken.worker_id,
                ago,
            )
        with tracing.slice_span(run, claimed.fresh) as traced:
            result = self._execute(claimed, lease_valid)
            traced.finish(str(result.outcome), result.detail)
        if run.concurrency_key is not None:
            result = dataclasses.replace(result, woke=self._free_place(run.concurrency_key))
        result.log(self.logger)
        if result.outcome in (Outcome.COMPLETED, Outcome.FAILED, Outcome.CONTINUED, Outcome.CANCELED):
            seconds = (claimed.clock() - run.started_at).total_seconds() if run.started_at is not None else None
            hooks.send(
                hooks.run_finished,
                run.workflow_name,
                run_id=run.id,
                status=str(result.outcome),
                error=result.detail,
                queue=run.queue,
                seconds=seconds,
            )
        elif result.outcome in (Outcome.PARKED, Outcome.RETRY, Outcome.UNKNOWN_WORKFLOW):
            hooks.send(
                hooks.run_parked,
                run.workflow_name,
                run_id=run.id,
                until=result.wake_at,
                reason=result.detail,
                queue=run.queue,
                outcome=str(result.outcome),
            )
        return result

    def _execute(self, claimed: ClaimedRun, lease_valid: Callable[[], bool]) -> SliceResult:
        run = claimed.run
        started = time.monotonic()
        try:
            result = execute_slice(self.store, claimed, lease_valid)
        except DatabaseError as exc:
            with self._lock:
                count = self._releases[run.id] = self._releases.get(run.id, 0) + 1
            delay = timedelta(seconds=backoff(count))
            recycle_connections()
            self.store.release(claimed, delay)  # never raises: when it fails, the lease expires instead
            result = SliceResult(
                run.id,
                run.workflow_name,
                Outcome.RELEASED,
                time.monotonic() - started,
                f"database error, released for {delay.total_seconds():g}s: {exc}",
                claimed.clock() + delay,
            )
        else:
            with self._lock:
                self._releases.pop(run.id, None)
        return result

    def _free_place(self, concurrency_key: str) -> tuple[Any, str] | None:
        """The slice let go of the run: wake the first run waiting for a place under its key.

        Never raises: a run waiting for a place asks again on its own after
        ``PROBE_INTERVAL`` anyway.
        """
        try:
            return self.store.free_place(concurrency_key, skip_if_quiet=True)
        except DatabaseError as exc:
            self.logger.warning("could not wake a run waiting under concurrency key %r: %s", concurrency_key, exc)
            return None
