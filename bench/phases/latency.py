"""Latency (``lat.*``): an idle worker, then sequential 1-step runs, each after a random idle gap.

``server_pNN`` = ``spec.run()`` called -> the run's ``finished_at``; ``result_pNN`` =
``spec.run()`` called -> ``handle.result()`` returned (what a caller observes).
"""

from __future__ import annotations

import glob
import random
import time
from contextlib import suppress
from typing import TYPE_CHECKING

from bench.databases import to_epoch
from bench.report import pct

if TYPE_CHECKING:
    from bench.context import Bench


def cpu_seconds(pid: int) -> float:
    """CPU time a process's threads have spent so far, in seconds (Linux schedstat: nanoseconds, not ticks)."""
    total = 0
    for task in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        with suppress(OSError), open(task) as fh:
            total += int(fh.read().split()[0])
    return total / 1e9


def run(bench: Bench) -> tuple[list[float], list[float], int]:
    args = bench.args
    samples = args.lat_n or bench.size(50 if args.peer_protocol else 200, 30, 10)
    gap = args.gap_ms if args.gap_ms is not None else bench.size(1000, 200, 100)
    return measure(bench, samples, gap)


def measure(bench: Bench, samples: int, gap_ms: int, conc: int = 20) -> tuple[list[float], list[float], int]:
    """-> (start -> finished_at, start -> result() returned, both in ms; the gap), for the RESULT line."""
    from django.db import connections

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

    bench.reset_tables()
    worker = bench.procs.start_worker(bench.effective_concurrency(conc), "latency")
    spec = registry.latest("bench-1")
    # 3 s idle in total, like the peers; the last 2 s measure what an idle worker costs.
    idle_cpu = cpu_seconds(worker.pid)
    time.sleep(2.0)
    idle_cpu = (cpu_seconds(worker.pid) - idle_cpu) / 2.0 * 100.0
    lat: list[float] = []
    nat: list[float] = []
    try:
        for i in range(samples):
            if gap_ms > 0:
                time.sleep(random.uniform(0, gap_ms) / 1000.0)
            s = time.time()
            handle = spec.run(i)
            handle.result(timeout=30)
            e = time.time()
            fin = WorkflowRun.objects.filter(id=handle.id).values_list("finished_at", flat=True).get()
            lat.append((to_epoch(fin) - s) * 1000.0)
            nat.append((e - s) * 1000.0)
    finally:
        connections.close_all()
        bench.procs.stop(worker)
    bench.emit("lat.idle_worker_cpu", idle_cpu, "% of a core (the worker process, idle, before the samples)", 3)
    bench.emit("lat.samples", len(lat), f"runs (1 step, idle worker, gap U(0,{gap_ms} ms))")
    for q in (50, 95, 99):
        bench.emit(f"lat.server_p{q}", pct(lat, q), "ms (start -> finished_at)", 1)
    for q in (50, 95, 99):
        bench.emit(f"lat.result_p{q}", pct(nat, q), "ms (start -> handle.result() returned)", 1)
    after = [n - s for n, s in zip(nat, lat, strict=True)]
    bench.emit("lat.result_after_finish_p50", pct(after, 50), "ms (handle.result() return - finished_at)", 1)
    return lat, nat, gap_ms
