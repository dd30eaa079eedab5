"""Starting runs (``starts.*``): one ``run()`` at a time from one thread, and ``run_many()`` in bulk.

In this process, on an empty table, no worker: what a Django view or a batch
job pays to start runs. ``single_per_s`` starts N runs of ``bench-3`` one
``spec.run()`` call at a time (each its own transaction, as a view does);
``bulk_per_s`` starts M runs with one ``spec.run_many()`` call, and
``bulk_keyed_per_s`` the same with an idempotency key per run. Each count is
checked against the table.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from bench.processes import PhaseError

if TYPE_CHECKING:
    from bench.context import Bench


def run(bench: Bench) -> dict:
    return measure(bench, 300 if bench.quick else 2_000, 2_000 if bench.quick else 10_000)


def measure(bench: Bench, single: int, bulk: int) -> dict:
    from django.db import connections

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

    spec = registry.latest("bench-3")
    figures: dict = {}
    for name, count, start in (
        ("single", single, lambda n: [spec.run({"i": i}) for i in range(n)]),
        ("bulk", bulk, lambda n: spec.run_many([{"i": i} for i in range(n)])),
        (
            "bulk_keyed",
            bulk,
            lambda n: spec.run_many([{"i": i} for i in range(n)], idempotency_keys=[f"k{i}" for i in range(n)]),
        ),
    ):
        bench.reset_tables()
        WorkflowRun.objects.exists()  # connect before the clock starts
        t0 = time.perf_counter()
        handles = start(count)
        seconds = time.perf_counter() - t0
        stored = WorkflowRun.objects.count()
        connections.close_all()
        if len(handles) != count or stored != count:
            raise PhaseError(f"starts.{name}: {len(handles)} handles and {stored} runs for {count} starts")
        figures[f"{name}_per_s"] = count / seconds
        bench.emit(f"starts.{name}_per_s", count / seconds, f"runs/s ({count} runs)", 0)
        bench.emit(f"starts.{name}_us_per_run", seconds / count * 1e6, "µs/run", 0)
    bench.reset_tables()
    return figures
