"""Fair queues (``fair.*``): a flood under one key beside small keys, claimed with fairness off and on.

10,000 runs of tenant "big" are started in one ``run_many``, then 10 runs
each of 100 other tenants (``--quick``: 1,000 and 10 each of 20), all due, in the
queue ``bench-fair``. The queue is then drained by claims of 10 (a worker
with 10 slots), in this process, with nothing executed: the claimed runs are
finished at once so the table keeps its size. Twice: with the queue not
listed in ``FAIR_QUEUES`` (oldest first, as before) and listed (fair).

- ``fair.<off|on>.claim10_ms`` / ``_p95_ms``: one claim of 10, median / p95,
  over the whole drain (the flood's first claims included);
- ``fair.<off|on>.small_wait_runs``: how many runs were claimed before the
  last run of a small tenant (its wait, counted in runs);
- ``fair.<off|on>.small_wait_s``: the same as time since the drain began (a
  claim loop that executes nothing: the real wait scales with the work);
- ``fair.on.start_ms``: starting the 1,000 small runs with fairness on (one
  look-up of its key's last place per tenant), ``fair.off.start_ms`` without.

On PostgreSQL the fair claim's plan is printed as a note (``EXPLAIN``), with
the data in place.
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from bench.processes import PhaseError
from bench.report import pct

if TYPE_CHECKING:
    from bench.context import Bench

QUEUE = "bench-fair"


def run(bench: Bench) -> None:
    flood, tenants, each = (1_000, 20, 10) if bench.quick else (10_000, 100, 10)
    for fair in (False, True):
        measure(bench, fair, flood, tenants, each)


def measure(bench: Bench, fair: bool, flood: int, tenants: int, each: int, batch: int = 10) -> None:
    from django.db import connection, connections
    from django.test import override_settings

    from bench.benchapp.workflows import bench_tenant
    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.store import get_backend

    label = "on" if fair else "off"
    lease = timedelta(seconds=30)
    wid = f"bench-fair-{uuid.uuid4().hex[:8]}"
    bench.reset_tables()
    with override_settings(OPENWORKFLOW={"FAIR_QUEUES": [QUEUE] if fair else []}):
        bench_tenant.run_many([{"t": "big"} for _ in range(flood)])
        t0 = time.perf_counter()
        small = bench_tenant.run_many([{"t": f"t{i}"} for _ in range(each) for i in range(tenants)])
        start_ms = (time.perf_counter() - t0) * 1000.0
        small_ids = {handle.id for handle in small}
        with connection.cursor() as cur:
            cur.execute(bench.dbh.analyze_sql)
            if cur.description:
                cur.fetchall()
        if fair and connection.vendor == "postgresql":
            explain(bench)
        times: list[float] = []
        claimed_count, last_small, last_small_s = 0, 0, 0.0
        began = time.perf_counter()
        while True:
            t1 = time.perf_counter()
            got = get_backend().claim(wid, batch, lease, (QUEUE,))
            times.append((time.perf_counter() - t1) * 1000.0)
            if not got:
                break
            for claim in got:
                claimed_count += 1
                if claim.run.id in small_ids:
                    last_small, last_small_s = claimed_count, time.perf_counter() - began
            WorkflowRun.objects.filter(id__in=[c.run.id for c in got]).update(status="completed", worker_id=None)
    if claimed_count != flood + tenants * each:
        raise PhaseError(f"claimed {claimed_count} of {flood + tenants * each} runs")
    bench.reset_tables()
    connections.close_all()
    shape = f"{flood} runs of one key + {each} of each of {tenants} others"
    bench.emit(f"fair.{label}.claim{batch}_ms", statistics.median(times), f"ms (claim of {batch}, {shape}, median)", 3)
    bench.emit(f"fair.{label}.claim{batch}_p95_ms", pct(times, 95), "ms", 3)
    bench.emit(f"fair.{label}.small_wait_runs", last_small, "runs claimed before a small tenant's last run", 0)
    bench.emit(f"fair.{label}.small_wait_s", last_small_s, "s (the same, claiming only: no work done)", 2)
    bench.emit(f"fair.{label}.start_ms", start_ms, f"ms (run_many of the {tenants * each} small runs)", 1)


def explain(bench: Bench) -> None:
    """The fair claim's plan (PostgreSQL), prepared as the workers prepare it, with the data in place."""
    import re

    from django.db import connection

    from django_openworkflow.store.backends.postgresql_claim import claim_sql

    numbered = iter(range(1, 10))
    sql = re.sub("%s", lambda _: f"${next(numbered)}", claim_sql(True, True))
    with connection.cursor() as cur:
        cur.execute("SET plan_cache_mode = force_generic_plan")
        cur.execute(f"PREPARE owf_fair_plan (text, bigint, text, text, interval) AS {sql}")
        try:
            cur.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE owf_fair_plan ('{QUEUE}', 10, 'running', 'x', '30s')")
            plan = [row[0] for row in cur.fetchall()]
        finally:
            cur.execute("DEALLOCATE owf_fair_plan")
            cur.execute("RESET plan_cache_mode")
    for line in plan:
        bench.note(f"fair claim plan: {line}")
    # The EXPLAIN ANALYZE above claimed 10 runs for worker "x": put them back.
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE openworkflow_run SET status = 'pending', worker_id = NULL, available_at = now() "
            "WHERE worker_id = 'x'"
        )
