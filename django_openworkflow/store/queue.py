"""The queue side of the runs table: claiming due runs, heartbeats, releasing, and what is due."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Q, Value
from django.db.models.functions import Coalesce
from django.utils.dateparse import parse_datetime

from ..definitions.flow import BLOCKED_UNTIL, DEFAULT_QUEUE, PROBE_INTERVAL
from ..models import WorkflowRun
from ..states import RunStatus
from .core import BackendCore
from .fairness import adopt, fair_queues, moved_to
from .records import ClaimedRun, DispatchState, RunRecord, TakenFrom

RUN_RECORD_FIELDS = (
    "id", "workflow_name", "version", "input", "attempts", "deadline_at", "parent_step_attempt_id", "error",
    "concurrency_key", "cancel_requested_at", "queue", "started_at", "trace_context", "rerun_from_step",
    "closes_children",
)  # fmt: skip
"""The columns a :class:`RunRecord` is read from, in its fields' order."""

CANDIDATE_FIELDS = (
    "id", "started_at", "worker_id", "status", "concurrency_key", "concurrency_limit", "concurrency_counts_parked",
    "rate_key", "rate_limit", "rate_period", "blocked_at", "available_at",
)  # fmt: skip


def _aware(value: Any) -> datetime | None:
    """A timestamp column as read: a datetime, or SQLite's text of a UTC time (None if it is neither)."""
    parsed = parse_datetime(value) if isinstance(value, str) else value
    return None if parsed is None else BackendCore._aware(parsed)


@dataclass(frozen=True)
class Candidate:
    """A due run a claim has locked, with what its admission depends on."""

    id: uuid.UUID
    started_at: Any  # only compared with None (SQLite's claim reads it as text)
    worker_id: str | None
    status: str
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    counts_parked: bool = False
    rate_key: str | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    blocked_at: Any = None  # only compared with None
    available_at: Any = None  # a held run's lease end (SQLite's claim reads it as text)

    @property
    def needs_place(self) -> bool:
        """Under a concurrency limit and not holding a place (a held run's lease expiring keeps its place)."""
        if self.concurrency_key is None or self.worker_id is not None:
            return False
        return self.status == RunStatus.PENDING or not self.counts_parked

    @property
    def needs_rate(self) -> bool:
        """Under a rate limit and never started: its first claim is the start the limit counts."""
        return self.rate_key is not None and self.started_at is None

    def claimed(self, worker_id: str, record: RunRecord, now: datetime) -> ClaimedRun:
        taken_from = None if self.worker_id is None else TakenFrom(self.worker_id, _aware(self.available_at))
        return ClaimedRun(
            record,
            worker_id,
            now,
            fresh=self.started_at is None,
            lease_expired=taken_from is not None,
            taken_from=taken_from,
        )


def _gate_keys(c: Candidate) -> set[str]:
    """The lock keys admitting ``c`` needs: its concurrency key and its rate key, where it needs them."""
    keys = set()
    if c.needs_place:
        keys.add(f"concurrency:{c.concurrency_key}")
    if c.needs_rate:
        keys.add(f"rate:{c.rate_key}")
    return keys


CLAIM_ROUNDS = 4
"""A claim looks again this many times at most when runs were refused by their limits ..."""
SCAN_LIMIT = 1000
"""... each time at ten times as many candidates, up to this many."""


class QueueOps(BackendCore):
    """Claims, leases and the due list, for workers and dispatchers."""

    # Which group goes first when a claim serves fair queues and others; guarded by its lock.
    _fair_turns = 0
    _fair_turns_lock = threading.Lock()

    def claim(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str] = (DEFAULT_QUEUE,)
    ) -> list[ClaimedRun]:
        """Claim up to ``limit`` due runs of ``queues``, highest priority first, then oldest, in one transaction.

        The portable claim: rows locked by another claimer are skipped
        (``SELECT ... FOR UPDATE SKIP LOCKED``), runs under a concurrency or
        rate limit are admitted or set aside (:meth:`_admit`), then the rest
        are leased with one UPDATE. Backends override :meth:`_select_due` or
        :meth:`_claim_queues` where their database does better. In a fair
        queue (``fairness.py``) the claim orders a priority's runs by their
        place in line instead of their due time.
        """
        if limit <= 0:
            return []
        fair = fair_queues(queues)
        if not fair:  # the usual case: the claim as it always was
            return self._claim_queues(worker_id, limit, lease, queues, fair=False)
        return self._claim_fairly(worker_id, limit, lease, queues, fair)

    def _claim_fairly(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str], fair: list[str]
    ) -> list[ClaimedRun]:
        """The fair queues, and the others (if the worker serves both), each claimed first in turn."""
        plain = [queue for queue in queues if queue not in fair]
        groups = [(fair, True), (plain, False)] if plain else [(fair, True)]
        with self._fair_turns_lock:  # guards the turn: claims of several threads share a backend
            self._fair_turns += 1
            if self._fair_turns % 2 == 0:
                groups.reverse()
        claimed: list[ClaimedRun] = []
        for group, is_fair in groups:
            claimed += self._claim_queues(worker_id, limit - len(claimed), lease, group, fair=is_fair)
            if len(claimed) >= limit:
                return claimed
        # Too few: runs started without a place in line (before the queue was fair) get one, then a look again.
        if adopt(fair, self.now(), self.write_lock):
            claimed += self._claim_queues(worker_id, limit - len(claimed), lease, fair, fair=True)
        return claimed

    def _claim_queues(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str], *, fair: bool
    ) -> list[ClaimedRun]:
        """Claim from ``queues``, all fair or none; a backend with a faster claim overrides this."""
        # A deadlock's victim (MariaDB: a claim beside the prune sweep's deletes) claims again at once.
        return self.retrying(lambda: self._claim(worker_id, limit, lease, queues, fair))

    def _claim(
        self, worker_id: str, limit: int, lease: timedelta, queues: Sequence[str], fair: bool = False
    ) -> list[ClaimedRun]:
        claimed: list[ClaimedRun] = []
        locked: set[str] = set()  # the first round locks the keys it needs; later ones keep to those
        with self.write_lock(), transaction.atomic(using=self.alias):
            now = self.now()
            scan = limit
            for round in range(CLAIM_ROUNDS):
                want = limit - len(claimed)
                due = self._select_due(now, max(want, scan), queues, fair)
                got, set_aside = self._lease_admitted(due, worker_id, now, lease, want, locked, may_lock=round == 0)
                claimed += got
                # Runs refused by their limits are out of the way now: look further,
                # so that a burst of them does not starve the runs behind it.
                if not set_aside or len(claimed) >= limit or len(due) < max(want, scan):
                    break
                scan = min(scan * 10, SCAN_LIMIT)
        return claimed

    def _lease_admitted(
        self,
        due: list[Candidate],
        worker_id: str,
        now: datetime,
        lease: timedelta,
        want: int,
        locked: set[str] | None = None,
        *,
        may_lock: bool = True,
    ) -> tuple[list[ClaimedRun], int]:
        """Inside the claim's transaction: admit up to ``want`` of ``due`` (locked) and lease them.

        Returns the claimed runs and how many candidates were set aside.
        """
        admitted, set_aside = self._admit(due, now, want, set() if locked is None else locked, may_lock=may_lock)
        if not admitted:
            return [], set_aside
        records = self._lease_records([candidate.id for candidate in admitted], worker_id, now, lease)
        return [candidate.claimed(worker_id, records[candidate.id], now) for candidate in admitted], set_aside

    def _lease_records(
        self, ids: list[uuid.UUID], worker_id: str, now: datetime, lease: timedelta
    ) -> dict[Any, RunRecord]:
        """Lease the runs ``ids`` (locked by this transaction) to ``worker_id``; their records, by id."""
        self._lease(WorkflowRun.objects.filter(id__in=ids), worker_id, now, lease)
        return {record.id: record for record in self._run_records(ids)}

    def _select_due(self, now: datetime, limit: int, queues: Sequence[str], fair: bool = False) -> list[Candidate]:
        """The first due runs in claim order, locked, skipping rows others have locked."""
        due = WorkflowRun.objects.due(now).filter(queue__in=list(queues))
        if fair:
            due = due.filter(fair_at__isnull=False).order_by("-priority", "fair_at", "available_at")
        else:
            due = due.order_by("-priority", "available_at")
        rows = self.lock_skipping_locked(due).values_list(*CANDIDATE_FIELDS)[:limit]
        return [Candidate(*row) for row in rows]

    def _admit(
        self, due: list[Candidate], now: datetime, want: int, locked: set[str], *, may_lock: bool = True
    ) -> tuple[list[Candidate], int]:
        """The first ``want`` candidates their limits let through, in order, and how many were set aside.

        Candidates refused on the way are set aside in the same transaction;
        those after the ``want``-th admitted one are left as they are.
        ``locked`` holds the keys this transaction has locked, and gets the
        ones this call locks. With ``may_lock`` False (a claim's later
        rounds) no new key is locked -- two claimers taking locks out of
        order would deadlock -- and candidates under other keys are left as
        they are.

        The keys involved are locked first (:meth:`lock_keys`), so two
        claimers never both take a key's last place. Places are counted from
        the runs themselves (held, or running if parked runs keep theirs) and
        starts from ``started_at`` within the window: nothing to drift when a
        worker dies. A run refused a place waits with ``available_at`` at
        :data:`BLOCKED_UNTIL` (out of the claim's way) except one per key,
        which asks again after :data:`PROBE_INTERVAL`; :meth:`free_place`
        wakes one as soon as a place is let go. A run over a rate limit
        waits until the window has room.
        """
        if not may_lock:
            due = [c for c in due if _gate_keys(c) <= locked]
        places = sorted({c.concurrency_key for c in due if c.needs_place and c.concurrency_key})
        rates = {c.rate_key: c.rate_period for c in due if c.needs_rate and c.rate_key}
        keys = set().union(*map(_gate_keys, due))
        if not keys:
            return due[:want], 0
        if may_lock:
            self.lock_keys(sorted(keys))
            locked.update(keys)
        held, in_progress = self._places_taken(places)
        window_ends = self._starts_in_window(rates, now)
        waiting: Counter[str] = Counter()
        admitted: list[Candidate] = []
        blocked: list[Candidate] = []
        deferred: dict[datetime, list[uuid.UUID]] = {}
        for c in due:
            if len(admitted) == want:
                break
            if c.needs_place:
                assert c.concurrency_key is not None and c.concurrency_limit is not None
                taken = (in_progress if c.counts_parked else held)[c.concurrency_key]
                if taken >= c.concurrency_limit:
                    blocked.append(c)
                    continue
            if c.needs_rate:
                assert c.rate_key is not None and c.rate_limit is not None and c.rate_period is not None
                ends, period = window_ends[c.rate_key], timedelta(seconds=c.rate_period)
                if len(ends) >= c.rate_limit:
                    # Each start leaving the window makes room for one; the claim then checks again.
                    k = waiting[c.rate_key]
                    waiting[c.rate_key] += 1
                    deferred.setdefault(ends[k % len(ends)] + period * (k // len(ends)), []).append(c.id)
                    continue
                ends.append(now + period)
            if c.needs_place:
                assert c.concurrency_key is not None
                held[c.concurrency_key] += 1
                in_progress[c.concurrency_key] += 1
            admitted.append(c)
        self._set_aside(blocked, deferred, now)
        self._keep_one_asking({c.concurrency_key for c in admitted if c.blocked_at is not None}, admitted, now)
        return admitted, len(blocked) + sum(map(len, deferred.values()))

    def _keep_one_asking(self, keys: set[str | None], admitted: list[Candidate], now: datetime) -> None:
        """A run that waited for a place got one: if the others of its key all wait at BLOCKED_UNTIL, one asks again.

        So a key's waiting runs always include one that is due soon, even if
        the :meth:`free_place` of a finishing run never comes (its worker died,
        or the database was away): nothing waits for ever.
        """
        taken = [c.id for c in admitted]
        for key in sorted(k for k in keys if k is not None):
            waiting = (
                WorkflowRun.objects.claimable()
                .filter(concurrency_key=key, blocked_at__isnull=False, worker_id__isnull=True)
                .exclude(id__in=taken)
            )
            first = (
                waiting.order_by("available_at", "-priority", "blocked_at").values_list("id", "available_at").first()
            )
            if first is not None and first[1] >= BLOCKED_UNTIL:
                WorkflowRun.objects.filter(id=first[0]).update(
                    available_at=now + PROBE_INTERVAL, fair_at=moved_to(now + PROBE_INTERVAL)
                )

    def _places_taken(self, keys: list[str]) -> tuple[Counter[str], Counter[str]]:
        """Per key: runs holding a worker, and runs in progress (held or parked)."""
        held: Counter[str] = Counter()
        in_progress: Counter[str] = Counter()
        if keys:
            running = WorkflowRun.objects.filter(concurrency_key__in=keys, status=RunStatus.RUNNING)
            counts = running.values("concurrency_key").annotate(runs=Count("id"), holders=Count("worker_id"))
            for row in counts.order_by():
                in_progress[str(row["concurrency_key"])] = row["runs"]
                held[str(row["concurrency_key"])] = row["holders"]
        return held, in_progress

    def _starts_in_window(self, periods: dict[str, float | None], now: datetime) -> dict[str, list[datetime]]:
        """Per rate key: when each start within its window leaves it, oldest first."""
        window_ends: dict[str, list[datetime]] = {}
        for key, period in periods.items():
            span = timedelta(seconds=period or 0)
            times = WorkflowRun.objects.filter(rate_key=key, started_at__gt=now - span).order_by("started_at")
            window_ends[key] = [started + span for started in times.values_list("started_at", flat=True) if started]
        return window_ends

    def _set_aside(self, blocked: list[Candidate], deferred: dict[datetime, list[uuid.UUID]], now: datetime) -> None:
        probes: dict[str | None, uuid.UUID] = {}
        for c in blocked:
            probes.setdefault(c.concurrency_key, c.id)
            self._quiet_keys.pop(str(c.concurrency_key), None)  # somebody waits now: free_place must look
        waiting = {
            now + PROBE_INTERVAL: list(probes.values()),
            BLOCKED_UNTIL: [c.id for c in blocked if c.id not in probes.values()],
        }
        for until, ids in waiting.items():
            if ids:
                WorkflowRun.objects.filter(id__in=ids).update(
                    available_at=until,
                    fair_at=moved_to(until),
                    blocked_at=Coalesce("blocked_at", Value(now)),
                    updated_at=now,
                )
        for until, ids in deferred.items():
            WorkflowRun.objects.filter(id__in=ids).update(available_at=until, fair_at=moved_to(until), updated_at=now)

    def _lease(self, runs: Any, worker_id: str, now: datetime, lease: timedelta) -> int:
        return int(
            runs.update(
                status=RunStatus.RUNNING,
                worker_id=worker_id,
                available_at=now + lease,
                started_at=Coalesce("started_at", now),
                updated_at=now,
                blocked_at=None,
                debounce_key=None,
            )
        )

    def _run_records(self, ids: list[Any]) -> list[RunRecord]:
        rows = WorkflowRun.objects.filter(id__in=ids).values_list(*RUN_RECORD_FIELDS)
        return [RunRecord(*row) for row in rows]

    def claim_run(self, run_id: Any, worker_id: str, lease: timedelta) -> ClaimedRun | None:
        """Claim one run by id if it is due and its limits admit it (for dispatchers that name the run)."""
        # A duplicate or early message is common under Celery: answer it with a
        # plain read, without taking SQLite's write lock or a row lock.
        if not WorkflowRun.objects.due(self.now()).filter(id=run_id).exists():
            return None
        with self.write_lock(), transaction.atomic(using=self.alias):
            now = self.now()
            candidate = self.lock_skipping_locked(WorkflowRun.objects.due(now).filter(id=run_id))
            due = [Candidate(*row) for row in candidate.values_list(*CANDIDATE_FIELDS)]
            claimed, _ = self._lease_admitted(due, worker_id, now, lease, 1)
        return claimed[0] if claimed else None

    def extend_leases(self, worker_id: str, lease: timedelta, run_ids: list[Any]) -> int:
        """The heartbeat: push the lease of the runs this worker is executing, in one UPDATE."""
        with self.write_lock():
            return (
                WorkflowRun.objects.held()
                .filter(id__in=run_ids, worker_id=worker_id)
                .update(available_at=self.now_expr(lease), updated_at=self.now_expr())
            )

    def held_among(self, worker_id: str, run_ids: list[Any]) -> set[Any]:
        """Which of these runs ``worker_id`` still holds (read by the heartbeat when a renewal missed some)."""
        if not run_ids:
            return set()
        held = WorkflowRun.objects.held().filter(id__in=run_ids, worker_id=worker_id)
        return set(held.values_list("id", flat=True))

    def cancel_requested_among(self, run_ids: list[Any]) -> set[Any]:
        """Which of these runs someone asked to cancel after their compensations (read by the heartbeat)."""
        if not run_ids:
            return set()
        asked = WorkflowRun.objects.filter(id__in=run_ids, cancel_requested_at__isnull=False)
        return set(asked.values_list("id", flat=True))

    # -- for dispatchers --

    def due_runs(self, limit: int) -> list[tuple[uuid.UUID, datetime, str]]:
        """(id, available_at, queue) of up to ``limit`` runs due now, oldest first; read-only."""
        due = WorkflowRun.objects.due(self.now()).order_by("available_at")
        return list(due.values_list("id", "available_at", "queue")[:limit])

    def due_children(self, run_id: Any) -> list[tuple[uuid.UUID, str]]:
        """(id, queue) of the runs a run started that are due now: its children, its successor (continue-as-new)."""
        started = Q(parent_step_attempt__workflow_run_id=run_id) | Q(continued_from_id=run_id)
        due = WorkflowRun.objects.due(self.now()).filter(started)
        return list(due.values_list("id", "queue"))

    def dispatch_state(self, run_id: Any) -> DispatchState | None:
        """Status, holder, next due time and parent of a run, in one query (None if it is gone)."""
        row = (
            WorkflowRun.objects.filter(id=run_id)
            .values_list(
                "status",
                "worker_id",
                "available_at",
                "parent_step_attempt__workflow_run_id",
                "queue",
                "parent_step_attempt__workflow_run__queue",
            )
            .first()
        )
        return DispatchState(*row) if row is not None else None
