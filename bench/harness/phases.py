"""The harness's phased cells B to G, run natively: labelled phases, with faults (B, C) or adapter knobs (D to G).

    python bench/harness/run.py --phase B --own-server        # the five chaos scenarios, every system
    python bench/harness/run.py --scenario chaos_pg_backend_kill --systems openworkflow --time-scale 0.5
    python bench/harness/run.py --scenario starvation_60min --systems openworkflow --minutes 30

A cell is one system under one scenario: a list of labelled phases
(``warmup``, ``baseline`` or ``clean_1``, the fault, ``recovery``), each a
harness phase type whose fault faults.py injects on entry and removes on
exit, while the system's replicas (adapter processes, each with its own
producer, ``PRODUCER_RATE`` each) run throughout. The scenarios, rates,
replicas and worker counts are those of the harness's 2026-05-09 sweep
(its ``scripts/run_full_sweep.sh`` and ``bench_harness/phases.py``;
``PHASES.md`` here); ``--time-scale`` shortens every phase for a first pass,
``--minutes`` sets the long phase of the starvation and soak cells.

Phases D to G inject nothing: each is a warm-up and one clean phase, with
the adapter's knobs for the phase in its environment (``Scenario.env``:
terminal or retried failures, a priority pattern and aging, several
queues; none for the soak). Their figures are the clean phase's median
completion rate and the medians of the optional metrics the adapter emits
(``retryable_failure_rate``, completions by priority, ``aged_completion_rate``),
and, from the server every 5 s, how the adapter's event tables grow: live
and dead tuples, table and index sizes, autovacuums.

The figures are the harness's (its ``render_plots.py``): phase B's is the
median ``completion_rate`` (summed over replicas, sample by sample) in
``recovery`` over the median in ``baseline``; phase C's the median in the
stress phase over the median in ``clean_1``, and whether every replica
exited 0 within the grace after SIGTERM. For our adapter the driver also
counts, from our own tables and the job's ledger, every run the producers
created that did not complete, and every step whose body ran more than
once or whose result was recorded twice: the harness has no per-job
accounting at all.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

from bench.harness import faults

ROOT = Path(__file__).resolve().parents[2]
# The harness's optional metrics phases D and E read (PHASES.md §4), kept per phase like completion_rate.
OPTIONAL_METRICS = (
    "retryable_failure_rate",
    "completed_priority_1_rate",
    "completed_priority_4_rate",
    "completed_original_priority_1_rate",
    "completed_original_priority_4_rate",
    "aged_completion_rate",
)


@dataclass(frozen=True)
class Phase:
    label: str
    kind: str
    seconds: float
    params: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    group: str  # "B" or "C"
    phases: tuple[Phase, ...]
    rate: float  # per replica, as the harness's PRODUCER_RATE
    replicas: int = 1
    workers: int = 32
    stress: str = ""  # phase C: the label compared with clean_1
    env: tuple[tuple[str, str], ...] = ()  # phases D-G: the adapter's knobs (PHASES.md §4)
    long: bool = False  # its last phase is the one --minutes sets (the starvation and soak cells)

    def scaled(self, factor: float, outage_s: float, minutes: float = 0.0) -> Scenario:
        def length(phase: Phase) -> float:
            if minutes and self.long and phase is self.phases[-1]:
                return minutes * 60
            seconds = max(10.0, round(phase.seconds * factor))
            if phase.kind == "postgres-restart":  # the outage, then time for the adapters to see the server back
                seconds = max(seconds, outage_s + 15)
            return seconds

        phases = tuple(Phase(p.label, p.kind, length(p), p.params) for p in self.phases)
        return replace(self, phases=phases)


def _cell(*phases: tuple[str, str, float] | tuple[str, str, float, dict[str, str]]) -> tuple[Phase, ...]:
    return tuple(Phase(p[0], p[1], p[2], tuple((p[3] if len(p) > 3 else {}).items())) for p in phases)  # type: ignore[misc]


_B = (("warmup", "warmup", 30), ("baseline", "clean", 60))
_C = (("warmup", "warmup", 30), ("clean_1", "clean", 60))
_WARMUP = ("warmup", "warmup", 30)
# awa's default (its PRIORITY_AGING_MS), which the harness's phase E ran with.
_AGING = ("PRIORITY_AGING_MS", "60000")
SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "chaos_postgres_restart",
            "B",
            _cell(*_B, ("restart", "postgres-restart", 60), ("recovery", "clean", 60)),
            600,
        ),
        Scenario(
            "chaos_pg_backend_kill",
            "B",
            _cell(*_B, ("kills", "pg-backend-kill", 60, {"rate": "2"}), ("recovery", "clean", 60)),
            600,
        ),
        # The harness asks for 300 idle sessions of its server's 400; faults.py holds the same share here.
        Scenario(
            "chaos_pool_exhaustion",
            "B",
            _cell(*_B, ("exhaustion", "pool-exhaustion", 60), ("recovery", "clean", 60)),
            600,
        ),
        Scenario(
            "chaos_crash_recovery",
            "B",
            _cell(
                *_B,
                ("kill", "kill-worker", 60, {"instance": "0"}),
                ("restart", "start-worker", 60, {"instance": "0"}),
                ("recovery", "clean", 60),
            ),
            300,
            replicas=2,
        ),
        Scenario(
            "chaos_repeated_kills",
            "B",
            _cell(
                *_B, ("repeated", "repeated-kill", 120, {"instance": "0", "period": "20s"}), ("recovery", "clean", 60)
            ),
            300,
            replicas=2,
        ),
        Scenario(
            "idle_in_tx",
            "C",
            _cell(*_C, ("idle_1", "idle-in-tx", 240), ("recovery_1", "clean", 180)),
            800,
            stress="idle_1",
        ),
        Scenario(
            "sustained_high_load",
            "C",
            _cell(*_C, ("pressure_1", "high-load", 240), ("recovery_1", "clean", 120)),
            800,
            stress="pressure_1",
        ),
        Scenario(
            "active_readers",
            "C",
            _cell(*_C, ("readers_1", "active-readers", 240), ("recovery_1", "clean", 120)),
            800,
            stress="readers_1",
        ),
        Scenario(
            "event_burst",
            "C",
            _cell(*_C, ("pressure_1", "high-load", 300), ("recovery_1", "clean", 240)),
            1200,
            workers=64,
            stress="pressure_1",
        ),
        # Phases D-G: the harness's cells (run_full_sweep.sh phase_d..phase_g) without their system's suffix.
        Scenario(
            "dlq_terminal",
            "D",
            _cell(_WARMUP, ("clean", "clean", 180)),
            800,
            env=(("WORKER_FAIL_MODE", "terminal-always"), ("BENCH_DLQ_ENABLED", "1"), ("JOB_MAX_ATTEMPTS", "1")),
        ),
        Scenario(
            "dlq_retry_smoke",
            "D",
            _cell(_WARMUP, ("clean", "clean", 180)),
            800,
            env=(("WORKER_FAIL_MODE", "retryable-first"), ("JOB_FAIL_FIRST_MOD", "2"), ("JOB_MAX_ATTEMPTS", "3")),
        ),
        Scenario(
            "mixed_priority",
            "E",
            _cell(_WARMUP, ("clean", "clean", 300)),
            800,
            env=(("JOB_PRIORITY_PATTERN", "1,2,3,4"), _AGING),
        ),
        Scenario(
            "starvation_60min",
            "E",
            _cell(_WARMUP, ("clean", "clean", 3600)),
            800,
            env=(("JOB_PRIORITY_PATTERN", "1,1,1,1,1,1,1,1,1,4"), _AGING),
            long=True,
        ),
        Scenario(
            "mixed_queue",
            "F",
            _cell(_WARMUP, ("clean", "clean", 300)),
            800,
            workers=64,
            env=(("BENCH_QUEUE_COUNT", "4"),),
        ),
        Scenario("soak_6h", "G", _cell(_WARMUP, ("clean", "clean", 6 * 3600)), 800, workers=128, long=True),
    )
}


def chosen(names: str, groups: str) -> list[Scenario]:
    wanted = [n for n in names.split(",") if n]
    unknown = [n for n in wanted if n not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}: one of {', '.join(SCENARIOS)}")
    return [s for s in SCENARIOS.values() if s.name in wanted or s.group in groups.upper().split(",")]


@dataclass
class CellResult:
    system: str
    scenario: str
    group: str
    rate: float
    replicas: int
    workers: int
    phases: list[tuple[str, str, float]]  # (label, type, seconds)
    started: str = ""
    load: list[float] = field(default_factory=list)  # /proc/loadavg's 1-minute figure, every 10 s
    completion: dict[str, list[float]] = field(default_factory=dict)  # phase -> summed completion_rate samples
    enqueue: dict[str, list[float]] = field(default_factory=dict)
    exits: list[tuple[int, int | None, float]] = field(default_factory=list)  # (replica, exit code, seconds)
    grace_s: float = 10.0
    aborted: str = ""  # the harness's rc=1: a replica exited during a phase, or a fault failed
    notes: list[str] = field(default_factory=list)
    stdin_dropped: dict[int, int] = field(default_factory=dict)
    accounting: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the knobs the cell gave the adapter
    optional: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # metric -> phase -> summed samples
    # Every 5 s: (seconds in, phase, {table: TableStats}), from pg_stat_user_tables and the relation sizes.
    tables: list[tuple[float, str, dict[str, TableStats]]] = field(default_factory=list)

    def median(self, label: str) -> float | None:
        values = self.completion.get(label, [])
        return statistics.median(values) if values else None

    def ratio(self, stress: str) -> float | None:
        """Phase B: recovery / baseline; phase C: the stress phase / clean_1 (the harness's render_plots.py)."""
        numerator = self.median("recovery" if self.group == "B" else stress)
        base = self.median("baseline" if self.group == "B" else "clean_1")
        return numerator / base if numerator is not None and base else None

    def clean_shutdown(self) -> bool:
        return bool(self.exits) and all(code == 0 and seconds <= self.grace_s for _, code, seconds in self.exits)


class TableStats(NamedTuple):
    live: int
    dead: int
    table_bytes: int
    index_bytes: int
    autovacuums: int


class Samples:
    """The replicas' records, stamped with the phase current when they arrive (as the harness stamps them)."""

    def __init__(self, every_s: int) -> None:
        self.lock = threading.Lock()
        self.every_s = every_s
        self.phase = "warmup"  # written by the driver's thread, read by the readers'
        # (phase, tick, metric) -> {replica: value}; guarded by lock
        self.values: dict[tuple[str, int, str], dict[int, float]] = collections.defaultdict(dict)

    def add(self, instance: int, record: dict[str, Any]) -> None:
        if record.get("metric") in ("completion_rate", "enqueue_rate", *OPTIONAL_METRICS):
            tick = round(time.time() / self.every_s)
            with self.lock:
                self.values[(self.phase, tick, record["metric"])][instance] = float(record["value"])

    def summed(self, metric: str) -> dict[str, list[float]]:
        """Per phase, the metric summed over the replicas tick by tick (the harness sums per sample ordinal)."""
        found: dict[str, list[float]] = collections.defaultdict(list)
        with self.lock:
            for (phase, _tick, name), by_replica in sorted(self.values.items(), key=lambda kv: kv[0][1]):
                if name == metric:
                    found[phase].append(sum(by_replica.values()))
        return dict(found)


def run_cell(
    system: str,
    scenario: Scenario,
    launch: tuple[list[str], Path, Path],
    base_url: str,
    logs: Path,
    args: Any,
    env: dict[str, str],
) -> CellResult:
    """One system under one scenario: its replicas, the phases and their faults, the stop, our accounting."""
    command, cwd, manifest_path = launch
    manifest = json.loads(manifest_path.read_text())
    database = manifest["db_name"] + args.db_suffix
    url = base_url.rsplit("/", 1)[0] + "/" + database
    admin = base_url.rsplit("/", 1)[0] + "/postgres"
    faults.wait_while_busy(f"{scenario.name} for {system}")
    shared = ""
    if any(p.kind in ("postgres-restart", "pool-exhaustion") for p in scenario.phases):
        shared = faults.wait_while_shared(admin, database, f"{scenario.name} for {system}")
    with faults.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{database}"')
    rate = args.rate or scenario.rate
    workers = args.workers or scenario.workers
    result = CellResult(
        system,
        scenario.name,
        scenario.group,
        rate,
        scenario.replicas,
        workers,
        [(p.label, p.kind, p.seconds) for p in scenario.phases],
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        grace_s=float(manifest.get("shutdown_grace_s", 10)),
        env=dict(scenario.env),
    )
    work = Path(tempfile.mkdtemp(prefix=f"owf-chaos-{system}-"))
    control = work / "producer_rate.txt"
    control.write_text(str(rate))
    ledger = work / "ledger"
    ledger.mkdir()
    cell_env = dict(
        env,
        DATABASE_URL=url,
        PRODUCER_MODE="fixed",
        PRODUCER_RATE=str(int(rate)),
        WORKER_COUNT=str(workers),
        PRODUCER_RATE_CONTROL_FILE=str(control),
        OWF_HARNESS_LEDGER=str(ledger),
        **dict(scenario.env),
    )
    samples = Samples(int(env["SAMPLE_EVERY_S"]))
    log = logs / f"{system}-{scenario.name}.log"
    log.write_bytes(b"")
    replicas = [faults.Replica(i, command, cwd, cell_env, log, samples.add) for i in range(scenario.replicas)]
    ctx = faults.FaultContext(
        admin,
        url,
        database,
        list(manifest["event_tables"]),
        replicas,
        control,
        rate,
        own_server=args.own_server,
        idle_conns=args.idle_conns,
    )
    stop = threading.Event()
    pacer = threading.Thread(target=pace, args=(replicas, rate, stop), name="pacer", daemon=True)
    watcher = threading.Thread(target=watch_load, args=(result.load, stop), name="load", daemon=True)
    tables = threading.Thread(
        target=watch_tables,
        args=(url, list(manifest["event_tables"]), samples, result, stop),
        name="tables",
        daemon=True,
    )
    try:
        for replica in replicas:
            replica.start()
        pacer.start()
        watcher.start()
        tables.start()
        for phase in scenario.phases:
            print(
                f"[chaos] {system} {scenario.name}: {phase.label} ({phase.kind}, {phase.seconds:g} s)",
                file=sys.stderr,
                flush=True,
            )
            samples.phase = phase.label
            enter, leave = faults.HOOKS[phase.kind]
            if enter:
                enter(ctx, dict(phase.params))
            try:
                crashed = hold(phase.seconds, replicas)
            finally:
                if leave:
                    leave(ctx)
            if crashed:
                result.aborted = f"replica {crashed[0]} exited (code {crashed[1]}) during {phase.label}"
                break
    except Exception as exc:  # a fault that failed voids the cell, as the harness's run aborts
        result.aborted = f"{type(exc).__name__}: {exc}"
    finally:
        samples.phase = "stopping"
        stop.set()
        tables.join(15)
        result.exits = stop_all(replicas, result.grace_s)
        if args.own_server:
            faults.ensure_server_started(ctx)
        result.notes = (
            ctx.notes + result.notes + ([f"other databases were in use all the same: {shared}"] if shared else [])
        )
        result.stdin_dropped = {r.instance: r.stdin_dropped for r in replicas}
        result.completion = samples.summed("completion_rate")
        result.enqueue = samples.summed("enqueue_rate")
        result.optional = {m: found for m in OPTIONAL_METRICS if (found := samples.summed(m))}
    if system == "openworkflow":
        # The figures first: the drain may have to wait a long while for the machine's busy flag.
        print(report([result]), file=sys.stderr, flush=True)
        result.accounting = account(url, ledger, cell_env, log)
    return result


def pace(replicas: list[faults.Replica], rate: float, stop: threading.Event) -> None:
    """The harness's pacer: an ``ENQUEUE n`` line every 25 ms on each replica's stdin (ours reads and drops them)."""
    credit = 0.0
    while not stop.wait(0.025):
        credit += rate * 0.025
        count, credit = int(credit), credit - int(credit)
        if count:
            for replica in replicas:
                replica.pace(f"ENQUEUE {min(count, 128)}\n".encode())


def watch_load(found: list[float], stop: threading.Event) -> None:
    while not stop.wait(10):
        found.append(os.getloadavg()[0])


def watch_tables(url: str, tables: list[str], samples: Samples, result: CellResult, stop: threading.Event) -> None:
    """Every 5 s until ``stop``: each event table's tuples, sizes and autovacuums, into ``result.tables``.

    Its own thread and connection; ``result.tables`` is read once the thread
    is joined. A failed read (the server busy, our session killed) is noted
    and the next one reconnects.
    """
    started, failures = time.monotonic(), 0
    query = (
        "SELECT schemaname || '.' || relname, n_live_tup, n_dead_tup, pg_table_size(relid), pg_indexes_size(relid),"
        " autovacuum_count FROM pg_stat_user_tables WHERE schemaname || '.' || relname = ANY(%s)"
    )
    while not stop.wait(5.0):
        try:
            with faults.connect(url, autocommit=True) as conn:
                while True:
                    found = {name: TableStats(*row) for name, *row in conn.execute(query, [tables]).fetchall()}
                    result.tables.append((round(time.monotonic() - started, 1), samples.phase, found))
                    if stop.wait(5.0):
                        return
        except Exception as exc:  # noted, not fatal: the next tick reconnects
            failures += 1
            if failures <= 3:
                result.notes.append(f"reading the event tables failed: {exc!r}")


def hold(seconds: float, replicas: list[faults.Replica]) -> tuple[int, int] | None:
    """Wait out a phase, looking every second for a replica that exited (the harness's _sleep_or_abort)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        for replica in replicas:
            if (code := replica.crashed()) is not None:
                return replica.instance, code
    return None


def stop_all(replicas: list[faults.Replica], grace_s: float) -> list[tuple[int, int | None, float]]:
    """Close stdin and SIGTERM every replica at once; SIGKILL what is left at the grace (the harness's stop_all)."""
    started = time.monotonic()
    alive = [r for r in replicas if r.proc is not None and r.proc.poll() is None]
    for replica in alive:
        replica.terminate()
    exits = []
    for replica in replicas:
        assert replica.proc is not None
        if replica not in alive:
            exits.append((replica.instance, replica.proc.returncode, 0.0))
            continue
        try:
            code: int | None = replica.proc.wait(max(0.1, started + grace_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            replica.kill()
            code = None  # did not exit within the grace: killed
        exits.append((replica.instance, code, time.monotonic() - started))
    return exits


# -- our accounting: every run created completed once, no step twice ---------------------------------


def account(url: str, ledger: Path, env: dict[str, str], log: Path, timeout_s: float = 180.0) -> dict[str, Any]:
    """Drain what the cell left (a plain ``runworkflows``), then count losses and repeats from our tables.

    A run is lost if it is not ``completed`` once nothing is left to drain
    (leases of killed workers run out after 30 s). From the job's ledger (a
    line per execution of the step's body, written outside the database),
    the runs whose body ran more than once; from the step attempts, a step
    whose result was recorded twice.
    """
    faults.wait_while_busy("draining the cell's runs")
    command = [sys.executable, "-m", "django", "runworkflows", "--settings=bench.harness.settings"]
    # Every queue: phase F's runs wait in queues of their own (harness-0, ...), not the default one.
    command += ["--concurrency", "16", "--verbosity", "0", "--queue", "*"]
    unfinished = "SELECT count(*) FROM openworkflow_run WHERE status NOT IN ('completed', 'failed', 'canceled')"
    found: dict[str, Any] = {}
    started = time.monotonic()
    with open(log, "ab") as out:
        drain = subprocess.Popen(
            command,
            cwd=ROOT,
            env=dict(env, OWF_HARNESS_APP_NAME="owf-harness-drain"),
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
        try:
            with faults.connect(url, autocommit=True) as conn:
                found["left_at_stop"] = conn.execute(unfinished).fetchone()[0]  # type: ignore[index]
                while conn.execute(unfinished).fetchone()[0] and time.monotonic() - started < timeout_s:  # type: ignore[index]
                    time.sleep(1.0)
        finally:
            drain.send_signal(signal.SIGTERM)
            try:
                drain.wait(30)
            except subprocess.TimeoutExpired:
                drain.kill()
    found["drain_s"] = round(time.monotonic() - started, 1)
    with faults.connect(url, autocommit=True) as conn:
        found["runs"] = dict(conn.execute("SELECT status, count(*) FROM openworkflow_run GROUP BY status").fetchall())
        found["created"] = sum(found["runs"].values())
        found["not_completed"] = found["created"] - found["runs"].get("completed", 0)
        # Neither completed nor failed (phase D's dead letters) once drained: lost.
        found["unfinished"] = found["not_completed"] - found["runs"].get("failed", 0)
        found["results_recorded_twice"] = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM openworkflow_step_attempt WHERE status = 'completed'"
            " GROUP BY workflow_run_id, step_name HAVING count(*) > 1) AS twice"
        ).fetchone()[0]  # type: ignore[index]
        found["steps_attempted_again"] = dict(
            conn.execute(
                "SELECT coalesce(error->>'name', error->>'type', status), count(*) FROM openworkflow_step_attempt"
                " WHERE status <> 'completed' GROUP BY 1"
            ).fetchall()
        )
        completed = {
            str(run_id) for (run_id,) in conn.execute("SELECT id FROM openworkflow_run WHERE status = 'completed'")
        }
    executions: collections.Counter[str] = collections.Counter()
    for path in ledger.glob("*.ledger"):
        executions.update(line for line in path.read_text().splitlines() if line)
    found["bodies_run_twice_or_more"] = sum(1 for n in executions.values() if n > 1)
    found["extra_body_runs"] = sum(n - 1 for n in executions.values() if n > 1)
    found["completed_without_a_body_run"] = len(completed - executions.keys())
    return found


# -- the report ------------------------------------------------------------------------------------


def fmt(value: float | None, digits: int = 0) -> str:
    """A figure for the reports (run.py's too): thousands separated, ``-`` for none."""
    return "-" if value is None else f"{value:,.{digits}f}"


def report(results: list[CellResult]) -> str:
    lines = [
        "| scenario | system | rate x replicas, workers | phases (s) | completions/s by phase (median) | ratio |"
        " shutdown | load (1 min) |",
        "| --- | --- | --- | --- | --- | ---: | --- | --- |",
    ]
    for r in results:
        stress = SCENARIOS[r.scenario].stress
        ratio = r.ratio(stress)
        by_phase = ", ".join(f"{label} {fmt(r.median(label))}" for label, _, _ in r.phases if label != "warmup")
        phases = " / ".join(f"{label} {seconds:g}" for label, _, seconds in r.phases)
        shutdown = (
            "exit 0 within grace" if r.clean_shutdown() else f"exits {[(i, c, round(s, 1)) for i, c, s in r.exits]}"
        )
        load = f"{min(r.load):.1f}-{max(r.load):.1f}" if r.load else "-"
        shown = "-" if ratio is None else f"{ratio:.0%}"
        if r.aborted:
            shown += f" (aborted: {r.aborted})"
        lines.append(
            f"| {r.scenario} | {r.system} | {fmt(r.rate)} x {r.replicas}, {r.workers} | {phases} | {by_phase} | {shown} |"
            f" {shutdown} | {load} |"
        )
    for r in results:
        for note in r.notes:
            lines.append(f"\n{r.system}, {r.scenario}: {note}")
        if dropped := {i: n for i, n in r.stdin_dropped.items() if n}:
            lines.append(f"\n{r.system}, {r.scenario}: pacing lines dropped on a full stdin pipe {dropped}")
        if r.group in ("D", "E", "F", "G"):
            enqueued = ", ".join(f"{p} {fmt(statistics.median(v))}" for p, v in r.enqueue.items() if p != "stopping")
            lines.append(f"\n{r.system}, {r.scenario}: enqueued/s by phase (median) {enqueued}")
        if r.env:
            lines.append(f"\n{r.system}, {r.scenario}: knobs {' '.join(f'{k}={v}' for k, v in r.env.items())}")
        if optional := optional_medians(r):
            lines.append(f"\n{r.system}, {r.scenario}: optional metrics (median, by phase) {optional}")
        for line in table_growth(r):
            lines.append(f"\n{r.system}, {r.scenario}: {line}")
        if r.accounting:
            lines.append(f"\n{r.system}, {r.scenario}: accounting {json.dumps(r.accounting)}")
    return "\n".join(lines)


def optional_medians(r: CellResult) -> str:
    """The optional metrics' medians per phase after the warm-up, ``metric phase value, ...``."""
    shown = [
        (metric, [(phase, v) for phase, v in by_phase.items() if v and phase not in ("warmup", "stopping")])
        for metric, by_phase in r.optional.items()
    ]
    return "; ".join(
        f"{metric} " + ", ".join(f"{phase} {fmt(statistics.median(v), 1)}" for phase, v in phases)
        for metric, phases in shown
        if phases
    )


def table_growth(r: CellResult) -> list[str]:
    """Per event table: live tuples, table and index sizes at the end of the warm-up and at the last reading;
    the peak of dead tuples after the warm-up; the autovacuums in between."""
    after = [(at, tables) for at, phase, tables in r.tables if phase != "warmup"]
    if not after:
        return []
    warm = [tables for _, phase, tables in r.tables if phase == "warmup"]
    first, (at, last) = (warm[-1] if warm else after[0][1]), after[-1]
    lines = []
    for name, end in sorted(last.items()):
        start = first.get(name, TableStats(0, 0, 0, 0, end.autovacuums))
        peak = max(tables[name].dead for _, tables in after if name in tables)
        lines.append(
            f"{name} after the warm-up -> {at:g} s: live {start.live:,} -> {end.live:,}, table "
            f"{start.table_bytes / 2**20:.1f} -> {end.table_bytes / 2**20:.1f} MB, indexes "
            f"{start.index_bytes / 2**20:.1f} -> {end.index_bytes / 2**20:.1f} MB, peak dead {peak:,}, "
            f"autovacuums {end.autovacuums - start.autovacuums}"
        )
    return lines


def save(results: list[CellResult], path: Path | None) -> None:
    if path is not None:
        path.write_text(json.dumps([asdict(r) for r in results], indent=1))
