"""Memory (``mem.*``): the worker's RSS when idle, after 1,000 and after 50,000 completed runs.

Worker at concurrency 20, 3-step runs; the producer starts them in transactions of 100 to
keep the phase short. RSS is read from /proc/<pid>/status; ``growth_mb`` is the difference.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from bench.processes import PhaseError, rss_mb
from bench.report import NAN

if TYPE_CHECKING:
    from bench.context import Bench


def run(bench: Bench) -> None:
    measure(bench, bench.size(1000, 500, 100), bench.size(50_000, 2_000, 400))


def measure(bench: Bench, first: int, total: int, conc: int = 20) -> None:
    procs = bench.procs
    bench.reset_tables()
    worker = procs.start_worker(bench.effective_concurrency(conc), "memory")
    rss_idle = rss_mb(worker.pid)
    producer = procs.start_producer("bench-3", total, batch=100)
    procs.go(producer)
    mon = bench.raw()
    rss_first = NAN
    done = 0
    give_up = time.monotonic() + bench.timeout
    while time.monotonic() < give_up:
        ((done,),) = bench.q(mon, "select count(*) from openworkflow_run where status = 'completed'")
        if math.isnan(rss_first) and done >= first:
            rss_first = rss_mb(worker.pid)
            at_first = done
        if done >= total:
            break
        if worker.poll() is not None:
            raise PhaseError(f"worker exited with {worker.returncode}:\n{procs.tail(worker)}")
        time.sleep(0.05 if math.isnan(rss_first) else 0.5)
    rss_end = rss_mb(worker.pid)
    mon.close()
    procs.producer_result(producer, 60)
    procs.stop(worker)
    if done < total:
        bench.note(f"memory: timed out with {done}/{total} completed")
        bench.ok = False
    bench.emit("mem.rss_idle_mb", rss_idle, "MB (worker idle, before any run)", 1)
    bench.emit(
        f"mem.rss_after_{first}_mb",
        rss_first,
        f"MB (sampled at {at_first if not math.isnan(rss_first) else 0} completed)",
        1,
    )
    bench.emit(f"mem.rss_after_{total}_mb", rss_end, f"MB ({done} completed)", 1)
    bench.emit("mem.growth_mb", rss_end - rss_first, f"MB (from {first} to {total} completed runs)", 1)
