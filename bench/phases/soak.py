"""Soak (``soak.*``): minutes of steady offered load with leases that matter; fails on a step run twice.

A starter subprocess starts one-step runs at a fixed rate (``--soak-rate``, runs/s), for
``--soak-minutes`` (default 30; ``--quick`` 2). ``--soak-workers`` real ``runworkflows``
subprocesses (default 2) with ``--soak-slots`` slots each (default 16) and a short lease
(``--soak-lease``, default 3 s, heartbeat every second) execute them:

* most steps sleep 1-10 ms; ``--soak-long-share`` of them (default 2 %) sleep 1.5 leases,
  so they finish only if the heartbeat keeps renewing their lease (at 120 runs/s they
  hold 11 of the 32 slots on average: 5 % would fill them);
* ``--soak-limited-share`` of the runs (default 10 %) are ``soak-limited`` runs, at most
  ``SOAK_LIMIT`` (2) per key over ``SOAK_KEYS`` (4) keys (``Concurrency``);
* ``--kill-every N`` SIGKILLs a worker every N seconds (the oldest first) and starts another.

Every step body writes a line to its worker's ledger when it starts and when it returns
(bench/benchapp/soak.py; a file, so nothing is rolled back). One row per ``--soak-interval``
(15 s with ``--quick``, else 60 s) says: runs started and completed per second, pickup
latency p50/p95/p99 (the starter calling ``run()`` -> the step body starting; runs without a
limit), p99 of the limited runs, leases renewed (counted in each worker from its heartbeat's
UPDATEs), the run table's garbage (PostgreSQL ``n_dead_tup``, MariaDB's history list length,
SQLite's WAL size), step executions beyond the first so far, and per worker process: live
``owf-slot-N`` threads (fewest seen in the row), whether its ``owf-heartbeat`` thread lives,
RSS, heartbeat UPDATEs in the row. Then a summary compares the first window after warm-up
with the last one (5 minutes each; ``--quick``: 30 s).

The phase fails on: a step executed more than once (with kills: more than once plus the
kills that interrupted it, i.e. executions by a killed worker whose slice never completed
the run), a concurrency key with more step bodies at once than its limit, a run still
unfinished after the drain, an ``owf-heartbeat`` thread gone while its process lives, a
worker that exited by itself, or a ledger that misses completed runs. Throughput and RSS
are reported, never asserted.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench import ledger as ledger_checks
from bench.ledger import Ledger
from bench.processes import RUN_PY, PhaseError, rss_mb
from bench.report import NAN, fmt, pct

if TYPE_CHECKING:
    import argparse

    from bench.context import Bench

SOAK_RATE = {"postgres": 120.0, "mariadb": 100.0, "sqlite": 80.0}
"""Default offered load, runs/s. On the 2-core development VM (shared with other work), 90 s
runs held 150 (PostgreSQL), 120 (MariaDB) and 100 (SQLite) runs/s with flat pickup p99
(20-30 ms; MariaDB, which polls, 70-120 ms): the defaults leave a fifth of that spare."""

SHORT_MS = (1.0, 10.0)
"""How long an ordinary step sleeps: uniform in this range, milliseconds."""

LONG_LEASES = 1.5
"""How long a long step sleeps, in leases."""

DRAIN_S = 120.0
"""After the last start, how long the runs may take to finish before the stragglers count as unfinished."""


# --------------------------------------------------------------------------- the starter's side


def start_runs(args: argparse.Namespace) -> None:
    """The starter subprocess (``run.py _soak_start``): start runs at ``--soak-rate`` per second.

    Open loop: run ``i`` is due at ``GO + i / rate`` whatever happened to the ones before;
    when a start is late it goes at once. Appends ``<i> <called> <returned> <run id>
    <limited>`` to ``starts.log`` per run, ``X ...`` per start that failed.
    """
    import django

    django.setup()
    from django.db import DatabaseError, connections

    from bench.benchapp.workflows import SOAK_KEYS, soak_free, soak_limited
    from django_openworkflow.models import WorkflowRun

    rng = random.Random(args.soak_seed)
    long_ms = args.soak_lease * LONG_LEASES * 1000.0
    WorkflowRun.objects.exists()  # connect before the clock starts
    print("READY", flush=True)
    sys.stdin.readline()
    t0 = time.time()
    with open(Path(args.soak_dir) / "starts.log", "a", buffering=1) as log:
        i = 0
        while True:
            due = t0 + i / args.soak_rate
            if due - t0 >= args.soak_seconds:
                break
            wait = due - time.time()
            if wait > 0:
                time.sleep(wait)
            spec: dict = {"ms": long_ms if rng.random() < args.soak_long_share else rng.uniform(*SHORT_MS)}
            limited = rng.random() < args.soak_limited_share
            if limited:
                spec["k"] = rng.randrange(SOAK_KEYS)
            spec["due"] = called = time.time()
            try:
                handle = (soak_limited if limited else soak_free).run(spec)
            except DatabaseError as exc:
                log.write(f"X {called:.6f} {i} {type(exc).__name__}: {exc}\n")
            else:
                log.write(f"{i} {called:.6f} {time.time():.6f} {handle.id} {int(limited)}\n")
            i += 1
    connections.close_all()


# --------------------------------------------------------------------------- the workers, from /proc


def thread_names(pid: int) -> list[str] | None:
    """The OS names of a process's threads (None if the process is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    names = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                names.append(fh.read().strip())
        except OSError:
            pass  # that thread just ended
    return names


@dataclasses.dataclass
class Worker:
    """One ``runworkflows`` subprocess, as the orchestrator's only thread sees it."""

    proc: subprocess.Popen
    label: str
    spawned: float
    armed: bool = False  # its owf-heartbeat thread has been seen
    heartbeat: bool = False  # ... at the last sample
    heartbeat_lost: float | None = None
    slots_min: int | None = None  # fewest owf-slot-N threads since the last row
    rss: list[tuple[float, float]] = dataclasses.field(default_factory=list)


def thread_exceptions(log_path: str) -> list[str]:
    """``Exception in thread X`` blocks of a worker's log, each as 'X: <its last line>'."""
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for n, line in enumerate(lines):
        match = re.match(r"Exception in thread (\S+?):?$", line)
        if not match:
            continue
        last = line
        for following in lines[n + 1 :]:
            if following.startswith((" ", "Traceback", "\t")):
                continue
            last = following
            break
        found.append(f"{match.group(1)}: {last.strip()}")
    return found


# --------------------------------------------------------------------------- the orchestrator


class Soak:
    """One soak run on one database."""

    def __init__(self, bench: Bench) -> None:
        args = bench.args
        self.bench = bench
        self.rate = args.soak_rate or SOAK_RATE[bench.db]
        self.duration = (args.soak_minutes * 60.0) if args.soak_minutes else (120.0 if bench.quick else 1800.0)
        self.interval = args.soak_interval or (15.0 if bench.quick else 60.0)
        self.warmup = 15.0 if bench.quick else 60.0
        window = 30.0 if bench.quick else 300.0
        self.window = min(window, max(self.interval, (self.duration - self.warmup) / 2))
        self.lease = args.soak_lease
        self.kill_every = args.kill_every
        self.n_workers = args.soak_workers
        # each worker: a connection per slot + claim loop + heartbeat + listener
        self.slots = max(1, bench.effective_concurrency(args.soak_workers * args.soak_slots) // args.soak_workers)
        self.dir = bench.tmp / "soak"
        self.dir.mkdir(exist_ok=True)
        self.ledger = Ledger(self.dir)
        self.workers: list[Worker] = []
        self.killed: dict[int, float] = {}  # pid -> when it was SIGKILLed
        self.failures: list[str] = []
        self.spawned = 0

    def fail(self, text: str) -> None:
        self.failures.append(text)
        self.bench.note(f"soak FAILURE: {text}")

    # ---- workers

    def spawn(self) -> Worker:
        self.spawned += 1
        env = {"BENCH_SOAK_DIR": str(self.dir)}
        if self.spawned == 1 and self.bench.args.soak_break_heartbeat is not None:
            env["BENCH_SOAK_BREAK_HEARTBEAT"] = str(self.bench.args.soak_break_heartbeat)
        proc, _ = self.bench.procs.spawn_worker(
            self.slots, f"soak-{self.spawned}", options=("--lease", f"{self.lease:g}s"), env=env
        )
        worker = Worker(proc, f"soak-{self.spawned}", time.time())
        self.workers.append(worker)
        return worker

    def sample(self, now: float) -> None:
        """Threads and RSS of every worker; notice a heartbeat thread gone, or a worker gone by itself."""
        for w in self.workers:
            if w.proc.pid in self.killed:
                continue
            names = thread_names(w.proc.pid)
            if w.proc.poll() is not None:
                if w.heartbeat_lost is None:
                    w.heartbeat_lost = now
                    self.fail(
                        f"worker {w.proc.pid} exited by itself with {w.proc.returncode}:\n"
                        f"{self.bench.procs.tail(w.proc)}"
                    )
                continue
            if names is None:
                continue
            slots = sum(1 for n in names if n.startswith("owf-slot-"))
            w.slots_min = slots if w.slots_min is None else min(w.slots_min, slots)
            w.heartbeat = "owf-heartbeat" in names
            if w.heartbeat:
                w.armed = True
            elif w.armed and w.heartbeat_lost is None:
                w.heartbeat_lost = now
                self.fail(
                    f"worker {w.proc.pid}: its owf-heartbeat thread is gone while the process lives "
                    f"({now - w.spawned:.0f}s after it started); its leases are no longer renewed"
                )
            elif not w.armed and now - w.spawned > 60:
                w.heartbeat_lost = now
                self.fail(f"worker {w.proc.pid}: no owf-heartbeat thread seen within 60 s of its start")
            w.rss.append((now, rss_mb(w.proc.pid)))

    def live(self) -> list[Worker]:
        return [w for w in self.workers if w.proc.pid not in self.killed and w.proc.poll() is None]

    def kill_one(self) -> None:
        victims = self.live()
        if not victims:
            return
        victim = victims[0]  # the oldest
        self.killed[victim.proc.pid] = time.time()
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        if victim.proc in self.bench.procs.children:
            self.bench.procs.children.remove(victim.proc)
        self.spawn()

    # ---- the report

    def header(self) -> None:
        label = self.bench.dbh.garbage_label
        self.bench.note(
            f"soak {'t_s':>5} {'start/s':>7} {'done/s':>7} {'pick_p50':>8} {'p95':>7} {'p99':>7} {'lim_p99':>7} "
            f"{'leases':>6} {label:>8} {'extra':>5} {'kills':>5}  workers (pid: min slot threads, heartbeat "
            "thread, RSS MB, heartbeat UPDATEs)"
        )

    def window_figures(self, lo: float, hi: float) -> dict:
        led = self.ledger
        span = hi - lo
        free = [lat * 1000 for at, lat, limited in led.pickups if lo <= at < hi and not limited]
        limited = [lat * 1000 for at, lat, lim in led.pickups if lo <= at < hi and lim]
        return {
            "start_per_s": sum(1 for at in led.starts if lo <= at < hi) / span,
            "wf_per_s": sum(1 for at in led.completions if lo <= at < hi) / span,
            "p50": pct(free, 50),
            "p95": pct(free, 95),
            "p99": pct(free, 99),
            "lim_p99": pct(limited, 99),
            "leases": sum(rows for at, _, rows in led.renewals if lo <= at < hi),
        }

    def row(self, t0: float, lo: float, hi: float, mon) -> None:  # type: ignore[no-untyped-def]
        f = self.window_figures(lo, hi)
        try:
            garbage = self.bench.dbh.garbage(mon)
        except Exception as exc:  # a statistics query must not end the soak
            self.bench.note(f"soak: could not read {self.bench.dbh.garbage_label}: {exc}")
            garbage = NAN
        cells = []
        for w in self.workers:
            if w.proc.pid in self.killed and self.killed[w.proc.pid] < lo:
                continue
            beats = sum(1 for at, pid, _ in self.ledger.renewals if pid == w.proc.pid and lo <= at < hi)
            if w.proc.pid in self.killed:
                state = "KILLED"
            else:
                state = "hb" if w.heartbeat else ("NO-HB" if w.armed else "starting")
            rss = w.rss[-1][1] if w.rss else NAN
            cells.append(f"{w.proc.pid}:{w.slots_min if w.slots_min is not None else '-'},{state},{fmt(rss)},{beats}")
            w.slots_min = None
        self.bench.note(
            f"soak {hi - t0:5.0f} {fmt(f['start_per_s']):>7} {fmt(f['wf_per_s']):>7} {fmt(f['p50']):>8} "
            f"{fmt(f['p95']):>7} {fmt(f['p99']):>7} {fmt(f['lim_p99']):>7} {f['leases']:6d} {fmt(garbage, 0):>8} "
            f"{self.ledger.extra:5d} {len(self.killed):5d}  {'  '.join(cells)}"
        )

    # ---- the run

    def start_starter(self) -> subprocess.Popen:
        args = self.bench.args
        cmd = [
            sys.executable,
            str(RUN_PY),
            "_soak_start",
            "--db",
            self.bench.db,
            "--soak-rate",
            str(self.rate),
            "--soak-seconds",
            str(self.duration),
            "--soak-lease",
            str(self.lease),
            "--soak-long-share",
            str(args.soak_long_share),
            "--soak-limited-share",
            str(args.soak_limited_share),
            "--soak-seed",
            str(args.soak_seed),
            "--soak-dir",
            str(self.dir),
        ]
        procs = self.bench.procs
        with open(self.dir / "starter.log", "w") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=RUN_PY.parent.parent,
                env=procs.child_env(BENCH_APP_NAME="owf-bench-producer"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        procs.children.append(proc)
        line = proc.stdout.readline()
        if "READY" not in line:
            proc.wait(10)
            raise PhaseError(f"soak starter failed to start (rc={proc.returncode}); see {self.dir / 'starter.log'}")
        return proc

    def unfinished(self, mon) -> int:  # type: ignore[no-untyped-def]
        ((count,),) = self.bench.q(mon, "select count(*) from openworkflow_run where status <> 'completed'")
        return int(count)

    def run(self) -> dict:
        bench = self.bench
        wrong = ledger_checks.self_check(bench.tmp / "soak-self-check")
        if wrong:
            raise PhaseError(f"the soak's checks do not catch what they must: {'; '.join(wrong)}")
        bench.reset_tables()
        from bench.benchapp.workflows import SOAK_KEYS, SOAK_LIMIT

        bench.note(
            f"soak: {self.rate:g} runs/s for {self.duration:.0f}s, {self.n_workers} workers x {self.slots} slots, "
            f"lease {self.lease:g}s, {bench.args.soak_long_share * 100:g}% steps of {self.lease * LONG_LEASES:g}s, "
            f"{bench.args.soak_limited_share * 100:g}% of runs under Concurrency({SOAK_LIMIT}) over {SOAK_KEYS} keys, "
            f"kill every {self.kill_every or '-'}s; ledger in {self.dir}"
        )
        caveat = bench.dbh.garbage_caveat()
        vacuum_every = bench.args.soak_vacuum_every
        if caveat:
            bench.note(f"soak: {caveat}")
            if vacuum_every:
                # A production server runs autovacuum; without a stand-in the soak would measure a
                # table that only grows, which no user runs.
                bench.note(
                    f"soak: standing in for autovacuum: VACUUM (ANALYZE) of the workflow tables every {vacuum_every:g}s"
                )
        for _ in range(self.n_workers):
            self.spawn()
        give_up = time.time() + 90
        while not all(w.armed for w in self.workers):
            self.sample(time.time())
            if self.failures:
                raise PhaseError("a soak worker did not start")
            if time.time() > give_up:
                raise PhaseError("soak workers: no owf-heartbeat thread after 90 s")
            time.sleep(0.2)
        for worker in self.workers:
            worker.slots_min = None  # counted from the first row on: before, the slots were starting
        starter = self.start_starter()
        mon = bench.raw()
        self.header()
        t0 = time.time()
        bench.procs.go(starter)
        load_end = t0 + self.duration
        next_row = t0 + self.interval
        next_kill = t0 + self.kill_every if self.kill_every else None
        next_vacuum = t0 + vacuum_every if caveat and vacuum_every else None
        drain_until = None
        last_row = t0
        left = None
        while True:
            time.sleep(0.5)
            now = time.time()
            self.ledger.read()
            self.sample(now)
            if now >= next_row:  # before a kill due now: the row then shows the victim killed in the next one
                self.row(t0, last_row, next_row, mon)
                last_row, next_row = next_row, next_row + self.interval
            if next_kill is not None and now >= next_kill and now < load_end:
                self.kill_one()
                next_kill += self.kill_every
            if next_vacuum is not None and now >= next_vacuum:
                bench.dbh.stand_in_for_autovacuum()
                next_vacuum = time.time() + vacuum_every
            if drain_until is None and starter.poll() is not None:
                if starter.returncode != 0:
                    self.fail(f"the starter exited with {starter.returncode}; see {self.dir / 'starter.log'}")
                drain_until = now + DRAIN_S
            if drain_until is not None and now >= load_end:
                left = self.unfinished(mon)
                if left == 0 or now >= drain_until:
                    break
                time.sleep(0.5)
            if now > load_end + DRAIN_S + 60:
                self.fail("the starter did not finish its starts in time")
                starter.kill()
                left = self.unfinished(mon)
                break
        drained = time.time()
        self.ledger.read()
        self.sample(drained)
        self.row(t0, last_row, drained, mon)
        if starter in bench.procs.children:
            bench.procs.children.remove(starter)
        for w in self.live():
            bench.procs.stop(w.proc)
        self.ledger.read()  # what the last slices wrote on their way out
        left = self.unfinished(mon)
        mon.close()
        return self.verdict(t0, load_end, drained - load_end, left)

    def verdict(self, t0: float, load_end: float, drain_s: float, left: int) -> dict:
        bench, led = self.bench, self.ledger
        first = self.window_figures(t0 + self.warmup, t0 + self.warmup + self.window)
        last = self.window_figures(load_end - self.window, load_end)
        w = f"{self.window:.0f}s"
        bench.emit("soak.offered_per_s", self.rate, "runs/s (offered)")
        bench.emit("soak.started", len(led.starts), f"runs ({len(led.start_errors)} starts failed)", 0)
        bench.emit("soak.completed", len(led.completions), "runs (completed slices in the ledger)", 0)
        bench.emit("soak.first_wf_per_s", first["wf_per_s"], f"runs/s (first {w} after a {self.warmup:.0f}s warm-up)")
        bench.emit("soak.last_wf_per_s", last["wf_per_s"], f"runs/s (last {w} of the load)")
        for q in ("p50", "p99"):
            bench.emit(f"soak.first_pickup_{q}_ms", first[q], "ms (starter's run() -> step body started)")
            bench.emit(f"soak.last_pickup_{q}_ms", last[q], "ms")
        bench.emit("soak.last_limited_pickup_p99_ms", last["lim_p99"], "ms (runs under Concurrency(2), last window)")
        growth = []
        for worker in self.workers:
            # each worker's own warm-up: a replacement started after a kill grows as it starts
            settled = max(t0, worker.spawned) + self.warmup
            during = [mb for at, mb in worker.rss if settled <= at <= load_end]
            if len(during) > 1:
                growth.append(during[-1] - during[0])
                bench.note(f"soak: worker {worker.proc.pid} RSS {during[0]:.1f} -> {during[-1]:.1f} MB")
        bench.emit("soak.rss_growth_mb", max(growth) if growth else NAN, "MB (most of any worker, warm-up -> end)")
        bench.emit("soak.lease_renewals", sum(r for _, _, r in led.renewals), "leases extended by heartbeats", 0)
        bench.emit("soak.heartbeat_updates", len(led.renewals), "heartbeat UPDATEs", 0)
        gaps = led.beat_gaps()
        gap = max(gaps.values(), default=NAN)
        bench.emit(
            "soak.heartbeat_gap_max_s",
            gap,
            f"s (longest time between a worker's heartbeats; the lease is {self.lease:g}s)",
        )
        bench.emit(
            "soak.heartbeat_update_max_ms", max(led.beat_ms.values(), default=NAN), "ms (longest heartbeat UPDATE)"
        )
        for pid, seconds in sorted(gaps.items()):
            if seconds > self.lease * 2 / 3:  # beats come every lease/3: one more missed and the lease lapses
                bench.note(f"soak: worker {pid} went {seconds:.1f}s between heartbeats (lease {self.lease:g}s)")
        long_bodies = sum(
            1
            for runs in led.executions.values()
            for ex in runs
            if ex.end is not None and ex.end - ex.start > self.lease
        )
        bench.emit("soak.long_steps", long_bodies, f"step bodies longer than the {self.lease:g}s lease", 0)
        bench.emit("soak.kills", len(self.killed), "workers SIGKILLed", 0)
        bench.emit("soak.drain_s", drain_s, "s (end of the starts -> every run finished)")

        bad = led.unexcused(self.killed)
        extra = sum(len(runs) - 1 for runs in bad)
        bench.emit("soak.extra_executions", led.extra, "step executions beyond the first (excused or not)", 0)
        bench.emit("soak.unexcused_executions", extra, "executions no kill explains (must be 0)", 0)
        for runs in bad[:5]:
            first_ex = runs[0]
            lines = ", ".join(
                f"pid {ex.pid} {ex.start - t0:.2f}s->{'?' if ex.end is None else f'{ex.end - t0:.2f}s'}"
                + (" (killed)" if ex.pid in self.killed else "")
                for ex in runs
            )
            bench.note(f"soak: run {first_ex.run_id} step {first_ex.step} executed {len(runs)} times: {lines}")
        if extra:
            self.fail(f"{extra} step execution(s) beyond the first that no kill explains ({len(bad)} steps)")

        from bench.benchapp.workflows import SOAK_LIMIT

        overlaps = led.overlaps(SOAK_LIMIT, self.killed, time.time())
        bench.emit(
            "soak.limit_overlaps", len(overlaps), f"times a key had more than {SOAK_LIMIT} bodies (must be 0)", 0
        )
        for key, at, inside in overlaps[:5]:
            bench.note(f"soak: key {key} had {inside} step bodies at once at {at - t0:.2f}s")
        if overlaps:
            self.fail(f"{len(overlaps)} time(s) a concurrency key had more than {SOAK_LIMIT} step bodies at once")

        bench.emit("soak.unfinished", left, "runs not completed after the drain (must be 0)", 0)
        if left:
            self.fail(f"{left} run(s) not completed {DRAIN_S:.0f}s after the last start")
        missing = len(led.starts) - len(led.executed_runs())
        if len(led.completions) < len(led.starts) - left or missing > left:
            self.fail(
                f"the ledger misses runs: {len(led.starts)} started, {len(led.executed_runs())} executed, "
                f"{len(led.completions)} completed slices, {left} unfinished"
            )
        lost = [worker.proc.pid for worker in self.workers if worker.heartbeat_lost is not None]
        bench.emit("soak.heartbeat_lost", len(lost), "workers whose owf-heartbeat thread died (must be 0)", 0)
        for worker in self.workers:
            for exc in thread_exceptions(worker.proc.log_path):  # type: ignore[attr-defined]
                bench.note(f"soak: worker {worker.proc.pid} log: exception in thread {exc}")
        for line in led.start_errors[:5]:
            bench.note(f"soak: a start failed: {line}")
        if self.failures:
            bench.ok = False
            bench.note(f"soak FAILED ({len(self.failures)} problem(s)); worker logs in {bench.tmp}")
        else:
            bench.note("soak: every step executed once (or once more per kill), no limit exceeded, all runs finished")
        return {"first": first, "last": last, "failures": self.failures}


def run(bench: Bench) -> dict:
    return Soak(bench).run()
