"""Throughput (``thr.<config>.*``) and commits per step (``commits.<config>.*``).

ONE `runworkflows` subprocess (idle first) + a producer subprocess starting N runs one
`spec.run()` at a time; wall = first start -> max(finished_at). Also a prefill variant:
the runs are inserted before the worker starts, wall = min(started_at) -> max(finished_at).
CPU (machine and worker) and the database's commit counters are read over the same window.
"""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from bench.databases import MONITOR_APP, PRODUCER_APP, WORKER_APP, to_epoch
from bench.processes import PhaseError, cpu_sample, loadavg, proc_cpu_s, read_commits
from bench.report import NAN

if TYPE_CHECKING:
    from bench.context import Bench


FLOW_QUEUE = "bench"
"""The queue of the ``bench-3-flow`` workflow (bench/benchapp/workflows.py)."""


def configs(bench: Bench) -> list[tuple[str, str, int, int, int, str, str]]:
    """(label, workflow, steps, n, concurrency, mode, RESULT cfg) of every configuration."""
    args, quick, pre = bench.args, bench.quick, bench.dbh.cfg_prefix
    if args.peer_protocol:
        n = args.n or (200 if quick else 2000)
        return [
            (f"live_c20_3x{n}", "bench-3", 3, n, 20, "live", f"{pre}_c20"),
            (f"live_c100_3x{n}", "bench-3", 3, n, 100, "live", f"{pre}_c100"),
            (f"prefill_c20_3x{n}", "bench-3", 3, n, 20, "prefill", f"{pre}_c20_prefill"),
        ]
    n4 = args.n or bench.size(1000, 200, 50)
    n3 = args.n or bench.size(2000, 200, 50)
    return [
        (f"live_c100_4x{n4}", "bench-4", 4, n4, 100, "live", f"{pre}_c100_4step"),
        (f"live_c20_3x{n3}", "bench-3", 3, n3, 20, "live", f"{pre}_c20"),
        (f"prefill_c20_3x{n3}", "bench-3", 3, n3, 20, "prefill", f"{pre}_c20_prefill"),
        # Flow control on (queue, priority, a limit that never binds), to compare with the two above.
        (f"live_c20_3x{n3}_flow", "bench-3-flow", 3, n3, 20, "live", f"{pre}_c20_flow"),
        (f"prefill_c20_3x{n3}_flow", "bench-3-flow", 3, n3, 20, "prefill", f"{pre}_c20_prefill_flow"),
    ]


def run(bench: Bench) -> list[tuple[str, dict]]:
    """Every configuration in turn; a failed one is noted and skipped. -> [(RESULT cfg, result)]."""
    rows: list[tuple[str, dict]] = []
    for label, wf, steps, n, conc, mode, cfg in configs(bench):
        try:
            r = measure(bench, label, wf, steps, n, conc, mode)
        except Exception as exc:
            bench.ok = False
            bench.note(f"{label} FAILED: {exc!r}")
            if not isinstance(exc, PhaseError):
                traceback.print_exc()
            bench.procs.kill_children()
            continue
        rows.append((cfg, r))
    return rows


def measure(bench: Bench, label: str, workflow: str, steps: int, n: int, conc: int, mode: str) -> dict:
    """One throughput configuration; returns the RESULT fields."""
    procs = bench.procs
    bench.reset_tables()
    bench.check_foreign_sessions(label)
    load_before = loadavg()
    conc_eff = bench.effective_concurrency(conc)
    count_dir = bench.tmp / f"counts-{label}"
    count_dir.mkdir(exist_ok=True)
    counting = bench.dbh.counts_in_process
    wcount = count_dir / "worker.json" if counting else None
    pcount = count_dir / "producer.json" if counting else None
    worker = None
    profiler = None
    queues = (FLOW_QUEUE,) if workflow.endswith("-flow") else ()
    if mode == "live":
        worker = procs.start_worker(conc_eff, label, wcount, queues)
        if bench.args.profile:
            profiler = start_profiler(bench, worker.pid, label)
    producer = procs.start_producer(workflow, n, count_file=pcount)

    def begin() -> tuple:
        return (
            cpu_sample(),
            bench.dbh.mark(),
            proc_cpu_s(worker.pid) if worker else NAN,
            time.time(),
        )

    t0 = bench.dbh.run_table_counters()
    mon = bench.raw()  # opened before the window: with --no-cap the server may run out of connections
    waits = None
    if mode == "live":
        waits = bench.dbh.wait_sampler()
        c0, m0, w0, _ = begin()
        procs.go(producer)
        prod = procs.producer_result(producer, bench.timeout)
    else:
        procs.go(producer)
        prod = procs.producer_result(producer, bench.timeout)
        bench.dbh.settle((PRODUCER_APP,))
        c0, m0, _, _ = begin()
        waits = bench.dbh.wait_sampler()
        worker, ready = procs.spawn_worker(conc_eff, label, wcount, queues)
        w0 = NAN
        give_up = time.monotonic() + 60
        while worker.poll() is None and time.monotonic() < give_up:
            if ready.exists():  # first connection: it is about to claim
                w0 = proc_cpu_s(worker.pid)
                break
            time.sleep(0.002)
    if bench.args.profile and profiler is None:
        profiler = start_profiler(bench, worker.pid, label)

    polls = 0
    give_up = time.monotonic() + bench.timeout
    done = failed = 0
    last_progress, last_count = time.monotonic(), -1
    while time.monotonic() < give_up:
        row = bench.q(
            mon,
            "select coalesce(sum(case when status = 'completed' then 1 else 0 end), 0), "
            "coalesce(sum(case when status in ('failed', 'canceled') then 1 else 0 end), 0) from openworkflow_run",
        )
        polls += 1
        done, failed = int(row[0][0]), int(row[0][1])
        if done + failed >= n:
            break
        if worker.poll() is not None:
            raise PhaseError(f"worker exited with {worker.returncode}:\n{procs.tail(worker)}")
        if done + failed != last_count:
            last_progress, last_count = time.monotonic(), done + failed
        elif time.monotonic() - last_progress > bench.stall:
            bench.note(
                f"{label}: no run finished for {bench.stall:.0f}s; giving up. Worker log tail:\n{procs.tail(worker)}"
            )
            break
        time.sleep(0.02)
    c1 = cpu_sample()
    w1 = proc_cpu_s(worker.pid)
    lock_object_pct = waits.finish() if waits is not None else None
    if done + failed < n:
        bench.note(f"{label}: timed out after {bench.timeout:.0f}s with {done}/{n} completed")
        bench.ok = False
    mon.close()
    if profiler is not None:
        procs.stop_profiler(profiler)
    procs.stop(worker)
    bench.dbh.settle((WORKER_APP, PRODUCER_APP, MONITOR_APP))
    m1 = bench.dbh.mark()

    t1 = bench.dbh.run_table_counters()
    mon = bench.raw()
    ((maxfin, minstart),) = bench.q(
        mon, "select max(finished_at), min(started_at) from openworkflow_run where status = 'completed'"
    )
    ((steps_done,),) = bench.q(mon, "select count(*) from openworkflow_step_attempt where status = 'completed'")
    mon.close()
    # live: first start -> last completion; prefill: first claim -> last completion
    wall = to_epoch(maxfin) - (prod["t_first"] if mode == "live" else to_epoch(minstart))
    busy, total = c1[0] - c0[0], c1[1] - c0[1]
    hz = os.sysconf("SC_CLK_TCK")
    cpu_util = 100.0 * busy / total if total else NAN
    cpu_ms_per_wf = busy / hz * 1000.0 / done if done else NAN
    worker_cpu_s = w1 - w0
    res = {
        "label": label,
        "mode": mode,
        "n": n,
        "conc": conc,
        "conc_effective": conc_eff,
        "steps": steps,
        "workflow": workflow,
        "completed": done,
        "failed": failed,
        "steps_done": steps_done,
        "wall_s": wall,
        "enqueue_s": prod["enqueue_s"],
        "cpu_util_pct": cpu_util,
        "cpu_ms_per_wf": cpu_ms_per_wf,
        "worker_cpu_ms_per_wf": worker_cpu_s * 1000.0 / done if done else NAN,
        "worker_cpu_pct": 100.0 * worker_cpu_s / wall if wall and wall > 0 else NAN,
        "load1": load_before,
    }
    if done:
        # prefill: the producer's start transactions are outside the window (as in the server counters)
        counted = read_commits(wcount) + (read_commits(pcount) if mode == "live" else 0)
        res.update(bench.dbh.commit_figures(m0, m1, polls, counted, done, steps_done))
    if t0 is not None and t1 is not None:
        upd = t1["upd"] - t0["upd"]
        res["run_updates"] = upd
        res["hot_pct"] = 100.0 * (t1["hot_upd"] - t0["hot_upd"]) / upd if upd else NAN
        res["dead_tup"] = t1["dead_tup"]
        res["dead_pct"] = 100.0 * t1["dead_tup"] / max(1, t1["dead_tup"] + t1["live_tup"])
    if lock_object_pct is not None:
        res["lock_object_pct"] = lock_object_pct
    res["ok"] = done == n and failed == 0 and steps_done >= steps * n
    if not res["ok"]:
        bench.ok = False
    print_figures(bench, res)
    return res


def start_profiler(bench: Bench, pid: int, label: str):  # type: ignore[no-untyped-def]
    return bench.procs.start_profiler(pid, Path(bench.args.profile) / f"{bench.short}-{label}.txt")


def print_figures(bench: Bench, r: dict) -> None:
    t = r["label"]
    if r["conc_effective"] != r["conc"]:
        bench.emit(f"thr.{t}.conc_effective", r["conc_effective"], "slots")
    bench.emit(f"thr.{t}.wf_per_s", r["completed"] / r["wall_s"] if r["wall_s"] else NAN, "wf/s")
    bench.emit(f"thr.{t}.steps_per_s", r["steps_done"] / r["wall_s"] if r["wall_s"] else NAN, "steps/s")
    bench.emit(f"thr.{t}.wall_s", r["wall_s"], "s", 2)
    bench.emit(f"thr.{t}.enqueue_s", r["enqueue_s"], "s", 2)
    bench.emit(f"thr.{t}.worker_cpu_pct", r["worker_cpu_pct"], "%(1 core=100)", 0)
    bench.emit(f"thr.{t}.machine_cpu_ms_per_wf", r["cpu_ms_per_wf"], "ms/wf", 2)
    bench.emit(f"thr.{t}.worker_cpu_ms_per_wf", r["worker_cpu_ms_per_wf"], "ms/wf", 2)
    bench.emit(f"thr.{t}.loadavg_before", r["load1"], "(1-min load average before the run; 2 cores)", 2)
    for key, figure, unit in bench.dbh.commit_lines:
        if key in r:
            bench.emit(f"commits.{t}.{figure}", r[key], unit, 2)
    if "lock_object_pct" in r:
        bench.emit(f"pgstat.{t}.lock_object_pct", r["lock_object_pct"], "% of active sessions waiting on Lock:object")
    if "run_updates" in r:
        bench.emit(f"pgstat.{t}.run_updates", r["run_updates"], "UPDATEs of openworkflow_run rows", 0)
        bench.emit(f"pgstat.{t}.hot_pct", r["hot_pct"], "% of them HOT (n_tup_hot_upd / n_tup_upd)", 1)
        bench.emit(f"pgstat.{t}.dead_tup", r["dead_tup"], "dead tuples in openworkflow_run at the end", 0)
        bench.emit(f"pgstat.{t}.dead_pct", r["dead_pct"], "% of its tuples dead", 1)
    if not r["ok"]:
        bench.note(
            f"{t}: NOT OK: completed={r['completed']}/{r['n']} failed={r['failed']} steps_done={r['steps_done']}"
        )
