"""The in-memory backend's claims and leases (the database backends' ``store/queue.py``)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ...definitions.flow import BLOCKED_UNTIL, DEFAULT_QUEUE, PROBE_INTERVAL
from ...states import RunStatus
from ...store.records import (
    ClaimedRun,
    DispatchState,
    TakenFrom,
)

if TYPE_CHECKING:
    pass
from .core import MemoryCore
from .rows import RunRow


class QueueOps(MemoryCore):
    """Claims, admission under concurrency and rate limits, leases."""

    def claim(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str] = (DEFAULT_QUEUE,)
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` due runs of ``queues``, highest priority first, then oldest."""
        if limit <= 0:
            return []
        with self.lock:
            now = self.now()
            due = [run for run in self._due(now) if run.queue in queues]
            due.sort(key=lambda run: (-run.priority, run.available_at))  # stable: ties in insertion order
            return self._lease_admitted(due, worker_id, now, lease, limit)

    def claim_run(self, run_id: Any, worker_id: str, lease: timedelta) -> ClaimedRun | None:
        """Claim one run by id if it is due and its limits admit it."""
        with self.lock:
            now = self.now()
            run = self.runs.get(run_id)
            if run is None or not run.is_due(now):
                return None
            claimed = self._lease_admitted([run], worker_id, now, lease, 1)
            return claimed[0] if claimed else None

    def _due(self, now: datetime) -> list[RunRow]:
        return [run for run in self.runs.values() if run.is_due(now)]

    def _lease_admitted(
        self, due: list[RunRow], worker_id: str, now: datetime, lease: timedelta, want: int
    ) -> list[ClaimedRun]:
        claimed = []
        for run in self._admit(due, now, want):
            fresh = run.started_at is None
            taken_from = None if run.worker_id is None else TakenFrom(run.worker_id, run.available_at)
            run.status, run.worker_id, run.available_at = RunStatus.RUNNING, worker_id, now + lease
            run.started_at = run.started_at or now
            run.updated_at, run.blocked_at, run.debounce_key = now, None, None
            claimed.append(
                ClaimedRun(
                    self._record(run),
                    worker_id,
                    now,
                    fresh=fresh,
                    lease_expired=taken_from is not None,
                    taken_from=taken_from,
                )
            )
        return claimed

    @staticmethod
    def _needs_place(run: RunRow) -> bool:
        """Under a concurrency limit and not holding a place (a held run's lease expiring keeps its place)."""
        if run.concurrency_key is None or run.worker_id is not None:
            return False
        return run.status == RunStatus.PENDING or not run.concurrency_counts_parked

    @staticmethod
    def _needs_rate(run: RunRow) -> bool:
        """Under a rate limit and never started: its first claim is the start the limit counts."""
        return run.rate_key is not None and run.started_at is None

    def _admit(self, due: list[RunRow], now: datetime, want: int) -> list[RunRow]:
        """The first ``want`` runs of ``due`` their limits let through; those refused on the way are set aside.

        The rules of ``QueueOps._admit``: places are counted from the runs
        (held, or in progress if parked runs keep theirs), starts from
        ``started_at`` within the rate window. A run refused a place waits at
        ``BLOCKED_UNTIL`` except one per key, which asks again after
        ``PROBE_INTERVAL``; a run over a rate limit waits until the window has room.
        """
        held: Counter[str] = Counter()
        in_progress: Counter[str] = Counter()
        for run in self.runs.values():
            if run.concurrency_key is not None and run.status == RunStatus.RUNNING:
                in_progress[run.concurrency_key] += 1
                held[run.concurrency_key] += run.worker_id is not None
        window_ends: dict[str, list[datetime]] = {}
        waiting: Counter[str] = Counter()
        admitted: list[RunRow] = []
        blocked: list[RunRow] = []
        deferred: list[tuple[RunRow, datetime]] = []
        for run in due:
            if len(admitted) == want:
                break
            needs_place, needs_rate = self._needs_place(run), self._needs_rate(run)
            if needs_place:
                assert run.concurrency_key is not None and run.concurrency_limit is not None
                taken = (in_progress if run.concurrency_counts_parked else held)[run.concurrency_key]
                if taken >= run.concurrency_limit:
                    blocked.append(run)
                    continue
            if needs_rate:
                assert run.rate_key is not None and run.rate_limit is not None and run.rate_period is not None
                period = timedelta(seconds=run.rate_period)
                if run.rate_key not in window_ends:
                    window_ends[run.rate_key] = self._starts_in_window(run.rate_key, period, now)
                ends = window_ends[run.rate_key]
                if len(ends) >= run.rate_limit:
                    # Each start leaving the window makes room for one; the claim then checks again.
                    k = waiting[run.rate_key]
                    waiting[run.rate_key] += 1
                    deferred.append((run, ends[k % len(ends)] + period * (k // len(ends))))
                    continue
                ends.append(now + period)
            if needs_place:
                assert run.concurrency_key is not None
                held[run.concurrency_key] += 1
                in_progress[run.concurrency_key] += 1
            admitted.append(run)
        self._set_aside(blocked, deferred, now)
        self._keep_one_asking(admitted, now)
        return admitted

    def _starts_in_window(self, rate_key: str, period: timedelta, now: datetime) -> list[datetime]:
        """When each start of ``rate_key`` within its window leaves it, oldest first."""
        starts = sorted(
            run.started_at
            for run in self.runs.values()
            if run.rate_key == rate_key and run.started_at is not None and run.started_at > now - period
        )
        return [started + period for started in starts]

    def _set_aside(self, blocked: list[RunRow], deferred: list[tuple[RunRow, datetime]], now: datetime) -> None:
        probes: dict[str | None, RunRow] = {}
        for run in blocked:
            probe = probes.setdefault(run.concurrency_key, run)
            run.available_at = now + PROBE_INTERVAL if probe is run else BLOCKED_UNTIL
            run.blocked_at = run.blocked_at or now
            run.updated_at = now
        for run, until in deferred:
            run.available_at, run.updated_at = until, now

    def _keep_one_asking(self, admitted: list[RunRow], now: datetime) -> None:
        """A run that waited for a place got one: if the others of its key all wait at BLOCKED_UNTIL, one asks again."""
        keys = sorted({run.concurrency_key for run in admitted if run.blocked_at is not None and run.concurrency_key})
        for key in keys:
            taken = {run.id for run in admitted}
            waiting = [run for run in self._blocked(key) if run.id not in taken]
            if waiting:
                first = min(waiting, key=lambda run: (run.available_at, -run.priority, run.blocked_at))
                if first.available_at >= BLOCKED_UNTIL:
                    first.available_at = now + PROBE_INTERVAL

    def extend_leases(self, worker_id: str, lease: timedelta, run_ids: list[Any]) -> int:
        """The heartbeat: push the lease of the runs this worker holds among ``run_ids``."""
        with self.lock:
            now = self.now()
            extended = 0
            for run_id in set(run_ids):
                run = self.runs.get(run_id)
                if run is not None and run.is_held and run.worker_id == worker_id:
                    run.available_at, run.updated_at = now + lease, now
                    extended += 1
            return extended

    def held_among(self, worker_id: str, run_ids: list[Any]) -> set[Any]:
        """Which of these runs ``worker_id`` still holds."""
        with self.lock:
            return {
                run_id
                for run_id in run_ids
                if (run := self.runs.get(run_id)) is not None and run.is_held and run.worker_id == worker_id
            }

    def cancel_requested_among(self, run_ids: list[Any]) -> set[Any]:
        """Which of these runs someone asked to cancel after their compensations."""
        with self.lock:
            return {
                run_id
                for run_id in run_ids
                if (run := self.runs.get(run_id)) is not None and run.cancel_requested_at is not None
            }

    def due_runs(self, limit: int) -> list[tuple[uuid.UUID, datetime, str]]:
        """(id, available_at, queue) of up to ``limit`` runs due now, oldest first."""
        with self.lock:
            due = sorted(self._due(self.now()), key=lambda run: run.available_at)
            return [(run.id, run.available_at, run.queue) for run in due[: max(limit, 0)]]

    def due_children(self, run_id: Any) -> list[tuple[uuid.UUID, str]]:
        """(id, queue) of the due runs a run started: its children, its successor."""
        with self.lock:
            return [
                (run.id, run.queue)
                for run in self._due(self.now())
                if run.continued_from_id == run_id or self._parent_id(run) == run_id
            ]

    def dispatch_state(self, run_id: Any) -> DispatchState | None:
        """Status, holder, next due time and parent of a run (None if it is gone)."""
        with self.lock:
            run = self.runs.get(run_id)
            if run is None:
                return None
            parent = self.runs.get(self._parent_id(run))
            return DispatchState(
                str(run.status),
                run.worker_id,
                run.available_at,
                parent.id if parent else None,
                run.queue,
                parent.queue if parent else None,
            )
