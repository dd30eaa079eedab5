"""Scale-out (``scale.*``): the same prefilled runs drained by one worker process, then by two.

On a 2-core machine one worker process and the database fill both cores already,
so two processes cannot drain faster here. What the phase shows is whether they
lose anything to each other on claims (two should drain at least 0.95x what one
does), and where the CPU of a workflow goes: ``worker_cpu_ms_per_wf`` (the
worker processes) and ``db_cpu_ms_per_wf`` (the database server's processes,
PostgreSQL's exited backends included through the postmaster's children times).
From those two the README projects what N worker machines drain against one
database server. SQLite has no server: its work is inside the workers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.databases import MONITOR_APP, PRODUCER_APP, WORKER_APP, to_epoch
from bench.processes import PhaseError, cpu_sample, proc_cpu_s
from bench.report import NAN

if TYPE_CHECKING:
    from bench.context import Bench

SERVER_COMMANDS = {"postgres", "mariadbd", "mysqld"}
CONCURRENCY = 20
"""Slots in all: one process with 20, or two with 10 each."""


def server_cpu_s() -> float:
    """CPU seconds of every database server process, with the children it has reaped (exited backends)."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        command = text[text.index("(") + 1 : text.rindex(")")]
        if command in SERVER_COMMANDS:
            fields = text.rsplit(")", 1)[1].split()
            total += sum(int(value) for value in fields[11:15])  # utime, stime, cutime, cstime
    return total / hz


def run(bench: Bench) -> dict:
    n = bench.size(4_000, 600, 150)
    figures = {count: measure(bench, count, n) for count in (1, 2)}
    one, two = figures[1]["wf_per_s"], figures[2]["wf_per_s"]
    bench.emit("scale.two_vs_one", two / one if one else NAN, "x (two processes' drain rate / one's)", 2)
    return figures


def measure(bench: Bench, processes: int, n: int) -> dict:
    procs = bench.procs
    label = f"scale_{processes}proc"
    bench.reset_tables()
    producer = procs.start_producer("bench-3", n)
    procs.go(producer)
    procs.producer_result(producer, bench.timeout)
    bench.dbh.settle((PRODUCER_APP,))
    machine0, server0 = cpu_sample(), server_cpu_s()
    spawned = [procs.spawn_worker(CONCURRENCY // processes, f"{label}-{i}") for i in range(processes)]
    # Each worker's CPU from its first connection: Django's start-up is not work on runs.
    started: list[float] = []
    give_up = time.monotonic() + 60
    for worker, ready in spawned:
        while not ready.exists() and worker.poll() is None and time.monotonic() < give_up:
            time.sleep(0.002)
        started.append(proc_cpu_s(worker.pid))
    mon = bench.raw()
    give_up = time.monotonic() + bench.timeout
    done = 0
    while time.monotonic() < give_up:
        ((finished,),) = bench.q(mon, "select count(*) from openworkflow_run where status = 'completed'")
        done = int(finished)
        if done >= n:
            break
        for worker, _ in spawned:
            if worker.poll() is not None:
                raise PhaseError(f"{label}: a worker exited with {worker.returncode}:\n{procs.tail(worker)}")
        time.sleep(0.02)
    machine1, server1 = cpu_sample(), server_cpu_s()
    worker_cpu = sum(proc_cpu_s(worker.pid) - began for (worker, _), began in zip(spawned, started, strict=True))
    ((last, first),) = bench.q(
        mon, "select max(finished_at), min(started_at) from openworkflow_run where status = 'completed'"
    )
    mon.close()
    for worker, _ in spawned:
        procs.stop(worker)
    bench.dbh.settle((WORKER_APP, MONITOR_APP))
    if done < n:
        bench.ok = False
        bench.note(f"{label}: {done}/{n} completed within {bench.timeout:.0f}s")
    wall = to_epoch(last) - to_epoch(first) if done else NAN
    hz = os.sysconf("SC_CLK_TCK")
    server = (server1 - server0) * 1000.0 / done if done and bench.dbh.name != "sqlite" else NAN
    result = {
        "wf_per_s": done / wall if wall and wall > 0 else NAN,
        "worker_cpu_ms_per_wf": worker_cpu * 1000.0 / done if done else NAN,
        "db_cpu_ms_per_wf": server,
        "machine_cpu_ms_per_wf": (machine1[0] - machine0[0]) / hz * 1000.0 / done if done else NAN,
    }
    slots = f"{processes} x {CONCURRENCY // processes} slots"
    bench.emit(f"scale.{label}.wf_per_s", result["wf_per_s"], f"wf/s ({n} prefilled runs x 3 steps, {slots})")
    bench.emit(f"scale.{label}.worker_cpu_ms_per_wf", result["worker_cpu_ms_per_wf"], "ms/wf (worker processes)", 2)
    bench.emit(f"scale.{label}.db_cpu_ms_per_wf", server, "ms/wf (database server processes)", 2)
    bench.emit(f"scale.{label}.machine_cpu_ms_per_wf", result["machine_cpu_ms_per_wf"], "ms/wf (whole machine)", 2)
    return result
