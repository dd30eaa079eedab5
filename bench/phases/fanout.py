"""Fan-out (``fanout.*``): one parent starts N children at once and collects their N results.

An idle `runworkflows` subprocess (concurrency 20), then this process starts one
``bench-fanout`` run (``ctx.step.start_workflow`` x N, then ``ctx.step.wait_all``;
bench/benchapp/workflows.py) and waits for it with ``handle.result()``.
``wall_s`` = ``spec.run()`` called -> ``handle.result()`` returned (what a caller
observes); ``server_wall_s`` = the same start -> the parent's ``finished_at``;
``children_done_s`` = start -> the last child's ``finished_at`` (so
``server_wall_s - children_done_s`` is the parent's own tail: noticing the last child and
finishing). The result is checked: N outputs, indexes 0..N-1 in order, N distinct child
run ids, each a completed ``bench-fanout-child`` run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.databases import WORKER_APP, to_epoch
from bench.processes import PhaseError, cpu_sample, loadavg, proc_cpu_s, read_commits
from bench.report import NAN

if TYPE_CHECKING:
    from bench.context import Bench

PARENT, CHILD = "bench-fanout", "bench-fanout-child"


def run(bench: Bench) -> dict:
    args, quick = bench.args, bench.quick
    return measure(bench, args.fanout_n or (50 if quick else 300))


def measure(bench: Bench, n: int, conc: int = 20) -> dict:
    """One fan-out of ``n`` children; returns the RESULT fields."""
    from django.db import connections

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

    procs = bench.procs
    bench.reset_tables()
    bench.check_foreign_sessions("fanout")
    load_before = loadavg()
    conc_eff = bench.effective_concurrency(conc)
    wcount = bench.tmp / "counts-fanout-worker.json" if bench.dbh.counts_in_process else None
    worker = procs.start_worker(conc_eff, "fanout", wcount)
    profiler = None
    if bench.args.profile:
        profiler = procs.start_profiler(worker.pid, Path(bench.args.profile) / f"{bench.short}-fanout.txt")
    spec = registry.latest(PARENT)
    WorkflowRun.objects.exists()  # connect before the clock starts
    c0, m0, w0 = cpu_sample(), bench.dbh.mark(), proc_cpu_s(worker.pid)
    try:
        t0 = time.time()
        handle = spec.run({"count": n})
        out = wait(bench, handle, n, t0)
        t1 = time.time()
    finally:
        c1, w1 = cpu_sample(), proc_cpu_s(worker.pid)
        connections.close_all()
        if profiler is not None:
            procs.stop_profiler(profiler)
        procs.stop(worker)
    bench.dbh.settle((WORKER_APP,))
    m1 = bench.dbh.mark()

    parent = WorkflowRun.objects.filter(id=handle.id).values_list("finished_at", flat=True).get()
    children = WorkflowRun.objects.filter(workflow_name=CHILD)
    child_rows = {str(i): (s, f) for i, s, f in children.values_list("id", "status", "finished_at")}
    connections.close_all()
    problems = check(out, n, child_rows)
    for p in problems:
        bench.note(f"fanout: {p}")
    last_child = max((to_epoch(f) for _, f in child_rows.values() if f is not None), default=NAN)
    busy, total = c1[0] - c0[0], c1[1] - c0[1]
    hz = os.sysconf("SC_CLK_TCK")
    wall = t1 - t0
    res = {
        "n": n,
        "conc": conc,
        "conc_effective": conc_eff,
        "wall_s": wall,
        "server_wall_s": to_epoch(parent) - t0,
        "children_done_s": last_child - t0,
        "children_per_s": n / wall if wall > 0 else NAN,
        "cpu_util_pct": 100.0 * busy / total if total else NAN,
        "machine_cpu_ms_per_child": busy / hz * 1000.0 / n,
        "worker_cpu_pct": 100.0 * (w1 - w0) / wall if wall > 0 else NAN,
        "load1": load_before,
        "distinct_children": len({r.get("run") for r in out if isinstance(r, dict)}) if isinstance(out, list) else 0,
        "ok": not problems,
    }
    figures = bench.dbh.commit_figures(m0, m1, 0, read_commits(wcount), n, 2 * n + 1)
    res["write_txn_per_child"] = figures.get("write_txn_per_wf", NAN)
    if problems:
        bench.ok = False
    print_figures(bench, res)
    return res


def wait(bench: Bench, handle, n: int, t0: float):  # type: ignore[no-untyped-def]
    """``handle.result()``, in slices of 5 s: between slices, give up early (PhaseError) when every
    child has finished but the parent has not for ``bench.stall`` seconds (a lost wake-up: the
    parent stays parked until its wait's limit, a year) or when the phase's timeout is over."""
    from django.db import connections

    from django_openworkflow import ResultTimeout
    from django_openworkflow.models import WorkflowRun

    while True:
        try:
            return handle.result(timeout=5.0)
        except ResultTimeout:
            pass
        waited = time.time() - t0
        children = WorkflowRun.objects.filter(workflow_name=CHILD)
        done = children.filter(status__in=("completed", "failed", "canceled")).count()
        last = max((to_epoch(f) for f in children.values_list("finished_at", flat=True) if f), default=NAN)
        parent = WorkflowRun.objects.filter(id=handle.id).values("status", "worker_id", "available_at").get()
        connections.close_all()
        if done >= n and time.time() - last > bench.stall:
            raise PhaseError(
                f"lost wake-up: all {n} children finished {time.time() - last:.0f}s ago but the parent "
                f"{handle.id} is still {parent['status']} (worker {parent['worker_id']}, due at "
                f"{parent['available_at']})"
            )
        if waited > bench.timeout:
            raise PhaseError(f"fan-out not finished after {waited:.0f}s: {done}/{n} children finished")


def check(out, n: int, child_rows: dict) -> list[str]:  # type: ignore[no-untyped-def]
    """What is wrong with the parent's output (nothing: [])."""
    if not isinstance(out, list) or len(out) != n:
        size = len(out) if isinstance(out, list) else "?"
        return [f"expected a list of {n} results, got {type(out).__name__} of length {size}"]
    problems = []
    if [r.get("i") if isinstance(r, dict) else None for r in out] != list(range(n)):
        problems.append("results are not the children's indexes 0..N-1 in order")
    ids = [r.get("run") for r in out if isinstance(r, dict)]
    if len(set(ids)) != n:
        problems.append(f"{len(set(ids))} distinct child run ids, expected {n}")
    bad = [i for i in ids if child_rows.get(str(i), ("?",))[0] != "completed"]
    if bad:
        problems.append(f"{len(bad)} result run ids are not completed {CHILD} runs (e.g. {bad[0]})")
    if len(child_rows) != n:
        problems.append(f"{len(child_rows)} {CHILD} runs in the database, expected {n}")
    return problems


def print_figures(bench: Bench, r: dict) -> None:
    n = r["n"]
    if r["conc_effective"] != r["conc"]:
        bench.emit("fanout.conc_effective", r["conc_effective"], "slots")
    bench.emit("fanout.children", n, f"children (1 step each), parent: start_workflow x {n} + wait_all")
    bench.emit("fanout.wall_s", r["wall_s"], "s (parent spec.run() -> handle.result() returned)", 3)
    bench.emit("fanout.children_per_s", r["children_per_s"], "children/s (N / wall_s)", 1)
    bench.emit("fanout.server_wall_s", r["server_wall_s"], "s (parent spec.run() -> parent finished_at)", 3)
    bench.emit("fanout.children_done_s", r["children_done_s"], "s (parent spec.run() -> last child finished_at)", 3)
    bench.emit("fanout.distinct_children", r["distinct_children"], "distinct child run ids in the result")
    bench.emit("fanout.worker_cpu_pct", r["worker_cpu_pct"], "%(1 core=100)", 0)
    bench.emit("fanout.machine_cpu_ms_per_child", r["machine_cpu_ms_per_child"], "ms/child", 2)
    bench.emit("fanout.write_txn_per_child", r["write_txn_per_child"], "write-txn/child (see commits.*)", 2)
    bench.emit("fanout.loadavg_before", r["load1"], "(1-min load average before the run; 2 cores)", 2)
    if not r["ok"]:
        bench.note(f"fanout: NOT OK ({r['distinct_children']}/{n} distinct children)")
