"""Typed attributes (``attributes.*``): the claim and the run list cost the same with attribute rows present.

In this process. N finished runs and 1,000 due ones are inserted (``claims.insert_runs_sql``);
the claim of 20 due runs and the run list's first page (``list_runs(limit=50)``) are timed,
then 3 attributes are added to every run (a customer id, a region, an amount: 3N rows of
``openworkflow_run_attribute``) and both are timed again, and once more after the attribute
rows are deleted (A/B/A: a machine busy with something else shows in both "without" figures).
``claim_ratio`` and ``list_ratio`` are with / the mean of the two without (target about 1:
neither reads the attribute table). ``eq_ms`` and
``range_ms`` time a first page filtered on one customer (equality on an int) and on the
amounts of at least 9,990 (a 0.1 % range on a Decimal), through their (name, value) indexes.
"""

from __future__ import annotations

import statistics
import time
from datetime import timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from bench.phases.claims import insert_runs_sql
from bench.processes import PhaseError

if TYPE_CHECKING:
    from bench.context import Bench


def run(bench: Bench) -> None:
    measure(bench, bench.size(200_000, 20_000, 2_000), bench.size(100, 30, 10))


def _median_ms(call: Any, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def measure(bench: Bench, finished: int, reps: int, batch: int = 20) -> None:
    from django.db import connection, connections

    from django_openworkflow import list_runs
    from django_openworkflow.models import RunAttribute, WorkflowRun
    from django_openworkflow.store import get_backend

    lease = timedelta(seconds=30)

    def insert(count: int, status: str, when: str) -> None:
        sql, params = insert_runs_sql(bench.dbh, count, status, when)
        with connection.cursor() as cur:
            cur.execute(sql.replace("'bench-3'", "'bench-3-attributes'"), params)

    def analyze() -> None:
        with connection.cursor() as cur:
            cur.execute(bench.dbh.analyze_sql)
            if cur.description:
                cur.fetchall()

    def claim() -> None:
        got = get_backend().claim("bench-attributes", batch, lease)
        if len(got) != batch:
            raise PhaseError(f"claim returned {len(got)} of {batch} due runs")
        WorkflowRun.objects.filter(id__in=[c.run.id for c in got]).update(
            status="pending", worker_id=None, available_at=get_backend().now()
        )

    def first_page() -> None:
        if len(list_runs(limit=50).runs) != 50:
            raise PhaseError("the run list's first page is not full")

    bench.reset_tables()
    insert(finished, "completed", "past")
    insert(1_000, "pending", "due")
    analyze()
    for _ in range(5):  # warm up: the caches, the prepared statements
        claim(), first_page()
    claim_without = _median_ms(claim, reps)
    list_without = _median_ms(first_page, reps)
    t0 = time.perf_counter()
    ids = list(WorkflowRun.objects.values_list("id", flat=True))
    for start in range(0, len(ids), 5_000):
        rows = []
        for offset, run_id in enumerate(ids[start : start + 5_000]):
            n = start + offset
            rows += [
                RunAttribute(workflow_run_id=run_id, name="customer_id", int_value=n % 5_000, position=-1),
                RunAttribute(workflow_run_id=run_id, name="region", str_value=("eu", "us", "apac")[n % 3], position=-1),
                RunAttribute(
                    workflow_run_id=run_id,
                    name="amount",
                    decimal_value=Decimal(n % 10_000) + Decimal("0.5"),
                    position=-1,
                ),
            ]
        RunAttribute.objects.bulk_create(rows)
    analyze()
    fill_s = time.perf_counter() - t0
    for _ in range(5):
        claim(), first_page()
    claim_with = _median_ms(claim, reps)
    list_with = _median_ms(first_page, reps)
    eq = _median_ms(lambda: list_runs(attributes={"customer_id": 42}, limit=50), reps)
    ranged = _median_ms(lambda: list_runs(attributes={"amount__gte": Decimal("9990")}, limit=50), reps)
    total = finished + 1_000
    found = len(list_runs(attributes={"customer_id": 42}, limit=500).runs)
    if found != len(range(42, total, 5_000)):
        raise PhaseError(f"customer_id=42 found {found} runs")
    RunAttribute.objects.all()._raw_delete(RunAttribute.objects.db)
    analyze()
    for _ in range(5):
        claim(), first_page()
    claim_after = _median_ms(claim, reps)
    list_after = _median_ms(first_page, reps)
    claim_without = (claim_without + claim_after) / 2
    list_without = (list_without + list_after) / 2
    bench.reset_tables()
    connections.close_all()
    bench.emit("attributes.fill_s", fill_s, f"s (3 attributes on each of {total} runs)", 1)
    bench.emit(
        f"attributes.claim{batch}_without_ms",
        claim_without,
        f"ms (claim {batch}, {total} runs, median, before and after)",
        3,
    )
    bench.emit(f"attributes.claim{batch}_with_ms", claim_with, f"ms (the same with {3 * total} attribute rows)", 3)
    bench.emit("attributes.claim_ratio", claim_with / claim_without, "x (with / without; target about 1)", 2)
    bench.emit(
        "attributes.list_without_ms", list_without, "ms (list_runs first page of 50, median, before and after)", 3
    )
    bench.emit("attributes.list_with_ms", list_with, "ms (the same with the attribute rows)", 3)
    bench.emit("attributes.list_ratio", list_with / list_without, "x (with / without; target about 1)", 2)
    bench.emit("attributes.eq_ms", eq, "ms (first page, customer_id = 42: int equality, median)", 3)
    bench.emit("attributes.range_ms", ranged, "ms (first page, amount >= 9990: a Decimal range, median)", 3)
