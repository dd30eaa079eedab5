"""Claim scaling (``claims.*``): latency of ``get_backend().claim`` on an empty table vs a full one.

Full: 1,000,000 finished runs and 10,000 parked ones (running, no worker, ``available_at`` a
day ahead), inserted by one ``INSERT ... SELECT`` over a generated series (the database's own
way: :meth:`bench.databases.BenchDB.insert_series`) and ``ANALYZE``d. ``*_idle_ms``: a claim
that finds nothing; ``*_claim20_ms``: claiming 20 due runs (inserted just before, outside the
timing). ``ratio`` = full / empty (claim of 20). The table is emptied afterwards.
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
    from bench.databases import BenchDB


def run(bench: Bench) -> None:
    size = bench.size
    measure(bench, size(1_000_000, 100_000, 5_000), size(10_000, 1_000, 200), size(200, 50, 20))
    measure_blocked(bench, size(10_000, 1_000, 200), 1_000, size(200, 50, 20))


def insert_runs_sql(dbh: BenchDB, count: int, status: str, when: str) -> tuple[str, list]:
    """One INSERT ... SELECT of ``count`` rows; ``when`` is 'past' | 'future' | 'due'.

    Columns this script does not know (added to the model later) get their
    Django default, so the filler keeps working while the model evolves.
    """
    from django.db import connection

    from django_openworkflow.models import WorkflowRun

    exprs_for = dbh.filler_exprs()
    times = {when_: exprs_for[when_] for when_ in ("past", "future", "due")}
    now, uid = exprs_for["now"], exprs_for["uid"]
    finished = status in ("completed", "failed", "canceled")
    known = {
        "id": uid,
        "workflow_name": "'bench-3'",
        "status": f"'{status}'",
        "input": "'0'",
        "output": "'3'" if finished else "NULL",
        "available_at": times[when],
        "created_at": times[when] if when != "due" else now,
        "updated_at": now,
        "started_at": times[when] if status != "pending" else "NULL",
        "finished_at": times[when] if finished else "NULL",
        "worker_id": "NULL",
        "attempts": "0",
    }
    cols, exprs, params = [], [], []
    for field in WorkflowRun._meta.concrete_fields:
        cols.append(connection.ops.quote_name(field.column))
        if field.column in known:
            exprs.append(known[field.column])
        elif field.null:
            exprs.append("NULL")
        else:
            exprs.append("%s")
            params.append(field.get_db_prep_save(field.get_default(), connection))
    insert = f"INSERT INTO openworkflow_run ({', '.join(cols)}) SELECT {', '.join(exprs)}"
    return dbh.insert_series(insert, params, count)


def measure(bench: Bench, finished: int, parked: int, reps: int, batch: int = 20) -> None:
    from django.db import connection, connections

    from django_openworkflow.store import get_backend

    lease = timedelta(seconds=30)
    wid = f"bench-claims-{uuid.uuid4().hex[:8]}"

    def analyze() -> None:
        with connection.cursor() as cur:
            cur.execute(bench.dbh.analyze_sql)
            if cur.description:  # MariaDB's ANALYZE TABLE answers with a status table
                cur.fetchall()

    def insert(count: int, status: str, when: str) -> None:
        sql, params = insert_runs_sql(bench.dbh, count, status, when)
        with connection.cursor() as cur:
            cur.execute(sql, params)

    def latencies() -> dict:
        idle, busy = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            got = get_backend().claim(wid, batch, lease)
            idle.append((time.perf_counter() - t0) * 1000.0)
            if got:
                raise PhaseError(f"idle claim returned {len(got)} runs")
        for _ in range(reps):
            insert(batch, "pending", "due")
            t0 = time.perf_counter()
            got = get_backend().claim(wid, batch, lease)
            busy.append((time.perf_counter() - t0) * 1000.0)
            if len(got) != batch:
                raise PhaseError(f"claim returned {len(got)} of {batch} due runs")
            ids = [c.run.id for c in got]
            from django_openworkflow.models import WorkflowRun

            WorkflowRun.objects.filter(id__in=ids).delete()
        return {
            "idle": statistics.median(idle),
            "idle_p95": pct(idle, 95),
            "busy": statistics.median(busy),
            "busy_p95": pct(busy, 95),
        }

    bench.reset_tables()
    analyze()
    latencies()  # warm up
    empty = latencies()
    t0 = time.perf_counter()
    insert(finished, "completed", "past")
    insert(parked, "running", "future")
    analyze()
    fill_s = time.perf_counter() - t0
    full = latencies()
    bench.reset_tables()
    connections.close_all()
    bench.emit("claims.fill_s", fill_s, f"s (insert {finished} finished + {parked} parked runs, ANALYZE)", 1)
    bench.emit("claims.empty_idle_ms", empty["idle"], "ms (claim finding nothing, empty table, median)", 3)
    bench.emit("claims.full_idle_ms", full["idle"], f"ms (claim finding nothing, {finished}+{parked} rows, median)", 3)
    bench.emit("claims.idle_ratio", full["idle"] / empty["idle"], "x", 2)
    bench.emit(f"claims.empty_claim{batch}_ms", empty["busy"], f"ms (claim {batch} due runs, empty table, median)", 3)
    bench.emit(
        f"claims.full_claim{batch}_ms",
        full["busy"],
        f"ms (claim {batch} due runs, {finished}+{parked} rows, median)",
        3,
    )
    bench.emit(f"claims.full_claim{batch}_p95_ms", full["busy_p95"], "ms", 3)
    bench.emit("claims.ratio", full["busy"] / empty["busy"], "x (full / empty, claim of due runs)", 2)


def measure_blocked(bench: Bench, blocked: int, runnable: int, reps: int, batch: int = 20) -> None:
    """``claims.blocked_*``: a claim of 20 among ``runnable`` due runs, alone and beside ``blocked`` ones.

    The blocked runs wait under a concurrency limit whose one place is held
    (as the claim leaves them: ``available_at`` at ``BLOCKED_UNTIL``, one of
    them asking again every second). Each claimed batch is put back as due
    runs, so every claim sees the same table.
    """
    from django.db import connection, connections

    from django_openworkflow.definitions.flow import BLOCKED_UNTIL
    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.store import get_backend

    lease = timedelta(seconds=30)
    wid = f"bench-blocked-{uuid.uuid4().hex[:8]}"

    def insert(count: int, status: str, when: str) -> None:
        sql, params = insert_runs_sql(bench.dbh, count, status, when)
        with connection.cursor() as cur:
            cur.execute(sql, params)

    def claims() -> float:
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            got = get_backend().claim(wid, batch, lease)
            times.append((time.perf_counter() - t0) * 1000.0)
            if len(got) != batch:
                raise PhaseError(f"claim returned {len(got)} of {batch} runnable runs")
            WorkflowRun.objects.filter(id__in=[c.run.id for c in got]).update(
                status="pending", worker_id=None, available_at=get_backend().now()
            )
        return statistics.median(times)

    bench.reset_tables()
    insert(runnable, "pending", "due")
    claims()  # warm up
    alone = claims()
    insert(blocked, "pending", "due")
    now = get_backend().now()
    waiting = WorkflowRun.objects.filter(workflow_name="bench-3", status="pending").order_by("created_at")
    ids = list(waiting.values_list("id", flat=True)[runnable:])
    for start in range(0, len(ids), 5000):
        WorkflowRun.objects.filter(id__in=ids[start : start + 5000]).update(
            concurrency_key="bench-key", concurrency_limit=1, blocked_at=now, available_at=BLOCKED_UNTIL
        )
    WorkflowRun.objects.filter(id=ids[0]).update(available_at=now + timedelta(seconds=1))  # the one that asks again
    WorkflowRun.objects.filter(id=ids[1]).update(status="running", worker_id="holder", blocked_at=None)
    with connection.cursor() as cur:
        cur.execute(bench.dbh.analyze_sql)
        if cur.description:
            cur.fetchall()
    beside = claims()
    bench.reset_tables()
    connections.close_all()
    bench.emit(f"claims.blocked_alone_claim{batch}_ms", alone, f"ms (claim {batch} of {runnable} due runs, median)", 3)
    bench.emit(
        f"claims.blocked_beside_claim{batch}_ms", beside, f"ms (the same beside {blocked} runs blocked by a limit)", 3
    )
    bench.emit("claims.blocked_ratio", beside / alone, "x (beside blocked / alone; target <= 1.5)", 2)
