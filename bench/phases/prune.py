"""Retention (``prune.*``): pruning N expired finished runs while a claim loop keeps claiming.

N finished runs (100,000; ``--quick`` 5,000), each with a two-entry
journal, are inserted by ``INSERT ... SELECT`` (as in the claims phase) and
given a retention of one second, so all of them are expired. A thread then
claims fresh runs in a loop (insert 5 due runs, claim them, finish them:
what a worker's claim loop does to the table) while the main thread runs
``retention.prune()`` with the default batch size. Printed: the prune's
rate, and the claim latency (median, p99, worst) before the prune and
during it. Every run must be gone afterwards, and every claim must have
got its runs.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from bench.phases.claims import insert_runs_sql
from bench.processes import PhaseError
from bench.report import pct

if TYPE_CHECKING:
    from bench.context import Bench

BATCH = 5


def run(bench: Bench) -> dict:
    return measure(bench, 5_000 if bench.quick else 100_000, 1.0 if bench.quick else 3.0)


def fill(bench: Bench, count: int) -> None:
    """``count`` completed runs that finished two days ago, retention one second, two journal entries each."""
    from django.db import connection

    from django_openworkflow.models import StepAttempt, WorkflowRun

    sql, params = insert_runs_sql(bench.dbh, count, "completed", "past")
    quote = connection.ops.quote_name
    runs, steps = quote(WorkflowRun._meta.db_table), quote(StepAttempt._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for step in ("one", "two"):
            cursor.execute(
                f"INSERT INTO {steps} (workflow_run_id, step_name, kind, status, output, created_at, started_at, "
                f"finished_at) SELECT id, '{step}', 'run', 'completed', '1', created_at, created_at, created_at "
                f"FROM {runs}"
            )
    WorkflowRun.objects.update(retention=timedelta(seconds=1))
    with connection.cursor() as cursor:
        cursor.execute(bench.dbh.analyze_sql)
        if cursor.description:
            cursor.fetchall()


class ClaimLoop(threading.Thread):
    """Insert a few due runs, claim them (timed), finish them without retention; until stopped."""

    def __init__(self) -> None:
        super().__init__(name="bench-claims", daemon=True)
        self.worker_id = f"bench-prune-{uuid.uuid4().hex[:8]}"
        self.samples: list[tuple[float, float]] = []  # (monotonic time, claim ms)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connections

        from django_openworkflow.definitions.registry import registry
        from django_openworkflow.models import WorkflowRun
        from django_openworkflow.store import get_backend

        spec = registry.latest("bench-3")
        store = get_backend()
        lease = timedelta(seconds=30)
        try:
            while not self.stop_event.is_set():
                # On MariaDB a statement beside the prune's deletes can be a deadlock's victim:
                # the store's claim runs again by itself, this loop's own writes do the same.
                store.retrying(lambda: spec.run_many([{"i": i} for i in range(BATCH)]))
                t0 = time.perf_counter()
                got = store.claim(self.worker_id, BATCH, lease)
                self.samples.append((time.monotonic(), (time.perf_counter() - t0) * 1000.0))
                if len(got) != BATCH:
                    raise PhaseError(f"claim returned {len(got)} of {BATCH} due runs")
                ids = [c.run.id for c in got]
                store.retrying(
                    lambda ids=ids: WorkflowRun.objects.filter(id__in=ids).update(
                        status="completed", worker_id=None, finished_at=store.now(), retention=None
                    )
                )
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()

    def between(self, start: float, end: float) -> list[float]:
        return [ms for at, ms in self.samples if start <= at <= end]


def measure(bench: Bench, count: int, baseline_s: float) -> dict:
    from django.db import connections

    from django_openworkflow.models import StepAttempt, WorkflowRun
    from django_openworkflow.worker.prune import prune

    bench.reset_tables()
    t0 = time.perf_counter()
    fill(bench, count)
    fill_s = time.perf_counter() - t0
    connections.close_all()

    loop = ClaimLoop()
    loop.start()
    before_start = time.monotonic()
    time.sleep(baseline_s)
    prune_start = time.monotonic()
    t0 = time.perf_counter()
    result = prune()
    prune_s = time.perf_counter() - t0
    prune_end = time.monotonic()
    loop.stop_event.set()
    loop.join(30)
    if loop.error is not None:
        raise PhaseError(f"the claim loop failed: {loop.error!r}")
    deleted = sum(result.runs.values())
    left = WorkflowRun.objects.filter(workflow_name="bench-3", retention__isnull=False).count()
    orphans = StepAttempt.objects.filter(workflow_run__isnull=True).count()
    before = loop.between(before_start, prune_start)
    during = loop.between(prune_start, prune_end)
    bench.reset_tables()
    connections.close_all()
    if deleted != count or left or orphans:
        raise PhaseError(f"prune deleted {deleted} of {count} runs; {left} expired runs left")
    if not before or not during:
        raise PhaseError(f"too few claims measured: {len(before)} before the prune, {len(during)} during it")
    figures = {
        "per_s": count / prune_s,
        "claim_before_ms": statistics.median(before),
        "claim_before_p99_ms": pct(before, 99),
        "claim_before_max_ms": max(before),
        "claim_during_ms": statistics.median(during),
        "claim_during_p99_ms": pct(during, 99),
        "claim_during_max_ms": max(during),
    }
    bench.emit("prune.fill_s", fill_s, f"s (insert {count} finished runs with 2 journal entries each)", 1)
    bench.emit("prune.seconds", prune_s, f"s (prune {count} expired runs, batches of the default size)", 2)
    bench.emit("prune.per_s", figures["per_s"], "runs/s (pruned, with their journals)", 0)
    bench.emit("prune.claims_during", len(during), f"claims of {BATCH} runs completed during the prune", 0)
    for name in ("before", "during"):
        bench.emit(f"prune.claim_{name}_ms", figures[f"claim_{name}_ms"], f"ms (claim of {BATCH}, {name}, median)", 2)
        bench.emit(f"prune.claim_{name}_p99_ms", figures[f"claim_{name}_p99_ms"], "ms (p99)", 2)
        bench.emit(f"prune.claim_{name}_max_ms", figures[f"claim_{name}_max_ms"], "ms (worst)", 2)
    return figures
