"""Run hardbyte/postgresql-job-queue-benchmarking's adapters natively, ours beside pg-boss's and procrastinate's.

    python bench/harness/run.py                 # 3 rounds of every cell, about 45 minutes
    python bench/harness/run.py --quick         # 1 round of 20 s cells: does everything run?
    python bench/harness/run.py --long 60       # and the long-horizon cell, 60 minutes per system

The harness (its orchestrator) runs PostgreSQL and the adapters in Docker;
these machines have none. This script does what its orchestrator does for a
cell, against the local PostgreSQL: it creates each adapter's database (its
``adapter.json``), launches the adapter as a plain process with the
harness's environment (``SCENARIO=long_horizon``, ``PRODUCER_MODE``, ...),
reads the JSON lines it prints, and samples what the harness's metrics
daemon samples from the server: dead tuples of the adapter's event tables
(``pg_stat_user_tables``) and the share of its sessions waiting on
``Lock:object`` (NOTIFY's commit lock). The systems run one after the other
within a round, in an order that turns each round, so that the machine's
noise falls on all of them.

The peers are installed under ``--work`` (default ``/tmp/owf-harness``), at
pinned versions, on first use: the harness itself at :data:`HARNESS_SHA`
(``git clone``, or ``--harness-source`` for a local mirror), its pg-boss
adapter with the npm lock file it ships, under Node.js :data:`NODE_VERSION`
from npm, and its procrastinate adapter in a Python 3.12 virtualenv with
the versions its ``pyproject.toml`` pins. Nothing of theirs is copied into
this repository. Ours is ``bench/harness/adapter.py``, run with this
checkout's virtualenv.

Cells (the issue's targets): a backlog of 4,000 held with 4 and with 16
workers (completions/s), 25 jobs/s offered to 4 workers (pickup latency),
and optionally a long-horizon cell at a fixed rate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from bench.harness import faults, phases  # noqa: E402  (this file runs as a script)
from bench.harness.phases import fmt  # noqa: E402

HARNESS_REPO = "https://github.com/hardbyte/postgresql-job-queue-benchmarking"
HARNESS_SHA = "93677cab92dad89ee9eccb0d6e113893de43cbe6"  # 2026-05: "Refresh README benchmark headline (#29)"
NODE_VERSION = "22.23.3"  # pg-boss 12.18.2 needs Node.js >= 22.12
SYSTEMS = ("openworkflow", "pgboss", "procrastinate")
# What the contract requires every sample tick (CONTRIBUTING_ADAPTERS.md).
REQUIRED_METRICS = {"claim_p50_ms", "claim_p95_ms", "claim_p99_ms", "enqueue_rate", "completion_rate", "queue_depth"}
PEER_FOLDERS = ("pgboss-bench", "procrastinate-bench", "CONTRIBUTING_ADAPTERS.md", "postgres.conf")
# The harness's postgres.conf settings that are not about the server's tuning (who may connect, its log).
NOT_TUNING = ("listen_addresses", "log_")
SAMPLE_EVERY_S = 5
# The phase D-G knobs (PHASES.md §4) each adapter reads. The harness's pg-boss and procrastinate adapters
# (at HARNESS_SHA) read none of them: only awa's and pgque's do, which is why its sweep ran D-G for those two.
PHASE_KNOBS = {
    "WORKER_FAIL_MODE",
    "JOB_FAIL_FIRST_MOD",
    "JOB_MAX_ATTEMPTS",
    "BENCH_DLQ_ENABLED",
    "JOB_PRIORITY_PATTERN",
    "PRIORITY_AGING_MS",
    "BENCH_QUEUE_COUNT",
}
KNOBS = {"openworkflow": PHASE_KNOBS, "pgboss": set(), "procrastinate": set()}


@dataclass
class Cell:
    name: str
    env: dict[str, str]
    seconds: float
    warmup: float


@dataclass
class Result:
    system: str
    cell: str
    round: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    series: list[tuple[float, str, float]] = field(default_factory=list)  # (seconds in, metric, value)
    dead_tuples: list[int] = field(default_factory=list)
    dead_share: list[float] = field(default_factory=list)
    lock_waits: list[float] = field(default_factory=list)
    cpu: list[tuple[float, float, float]] = field(default_factory=list)  # (seconds in, adapter CPU s, server CPU s)
    exit_code: int | None = None
    warmup: float = 0.0

    def median(self, metric: str) -> float | None:
        values = self.samples.get(metric, [])
        return statistics.median(values) if values else None

    def cpu_per_job(self, warmup: float) -> tuple[float, float] | None:
        """CPU ms per completed job after the warm-up, (the adapter's processes, PostgreSQL's backends)."""
        done = sum(self.samples.get("completion_rate", [])) * SAMPLE_EVERY_S
        after = [reading for reading in self.cpu if reading[0] >= warmup]
        if len(after) < 2 or not done:
            return None
        (_, adapter0, server0), (_, adapter1, server1) = after[0], after[-1]
        return (adapter1 - adapter0) * 1000 / done, (server1 - server0) * 1000 / done


def cells(seconds: float, warmup: float, long_minutes: float, long_rate: int) -> list[Cell]:
    backlog = {"PRODUCER_MODE": "depth-target", "TARGET_DEPTH": "4000"}
    found = [
        Cell("backlog 4000, 4 workers", {**backlog, "WORKER_COUNT": "4"}, seconds, warmup),
        Cell("backlog 4000, 16 workers", {**backlog, "WORKER_COUNT": "16"}, seconds, warmup),
        Cell(
            "25 jobs/s, 4 workers",
            {"PRODUCER_MODE": "fixed", "PRODUCER_RATE": "25", "WORKER_COUNT": "4"},
            seconds,
            warmup,
        ),
    ]
    if long_minutes:
        fixed = {"PRODUCER_MODE": "fixed", "PRODUCER_RATE": str(long_rate), "WORKER_COUNT": "16"}
        found.append(Cell(f"long horizon, {long_rate} jobs/s, 16 workers", fixed, long_minutes * 60, 60))
    return found


# -- installing the peers --------------------------------------------------


def run(command: list[str], **kwargs: Any) -> None:
    print("$", " ".join(command), file=sys.stderr)
    subprocess.run(command, check=True, **kwargs)


def install(work: Path, source: str, systems: list[str]) -> Path:
    """The harness at HARNESS_SHA, and the peers' adapters among ``systems`` ready to run; the harness's folder."""
    harness = work / "harness"
    if systems == ["openworkflow"]:
        return harness  # ours needs nothing of the harness's
    if not (harness / ".git").exists():
        run(["git", "clone", "--quiet", "--no-checkout", source, str(harness)])
    # Only the adapters run here (a mirror may lack the harness's large result files).
    run(["git", "-C", str(harness), "checkout", "--quiet", HARNESS_SHA, "--", *PEER_FOLDERS])
    node = work / "node" / "node_modules" / ".bin" / "node"
    if "pgboss" in systems and not node.exists():
        (work / "node").mkdir(parents=True, exist_ok=True)
        run(["npm", "install", "--no-audit", "--no-fund", "--silent", f"node@{NODE_VERSION}"], cwd=work / "node")
    pgboss = work / "pgboss"
    if "pgboss" in systems and not (pgboss / "node_modules" / "pg-boss").exists():
        pgboss.mkdir(parents=True, exist_ok=True)
        for name in ("package.json", "package-lock.json", "main.js"):
            shutil.copy(harness / "pgboss-bench" / name, pgboss / name)
        run(["npm", "ci", "--omit=dev", "--no-audit", "--no-fund", "--silent"], cwd=pgboss)
    venv = work / "procrastinate"
    if "procrastinate" in systems and not (venv / "bin" / "python").exists():
        python = shutil.which("python3.12") or "python3.12"
        run([python, "-m", "venv", str(venv)], env=dict(os.environ, PYENV_VERSION="3.12.1"))
        pins = pinned_dependencies(harness / "procrastinate-bench" / "pyproject.toml")
        run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *pins])
    return harness


def pinned_dependencies(pyproject: Path) -> list[str]:
    import tomllib

    return list(tomllib.loads(pyproject.read_text())["project"]["dependencies"])


def launch_spec(system: str, work: Path, harness: Path) -> tuple[list[str], Path, Path]:
    """The adapter's command, working directory and adapter.json."""
    if system == "openworkflow":
        manifest = ROOT / "bench" / "harness" / "adapter.json"
        return [sys.executable, "-m", "bench.harness.adapter"], ROOT, manifest
    if system == "pgboss":
        node = work / "node" / "node_modules" / ".bin" / "node"
        return [str(node), "main.js"], work / "pgboss", harness / "pgboss-bench" / "adapter.json"
    if system == "procrastinate":
        python = work / "procrastinate" / "bin" / "python"
        folder = harness / "procrastinate-bench"
        return [str(python), str(folder / "main.py")], folder, folder / "adapter.json"
    raise SystemExit(f"unknown system {system!r}: one of {', '.join(SYSTEMS)}")


# -- the server's settings ---------------------------------------------------


def harness_settings(conf: Path) -> dict[str, str]:
    """The tuning in the harness's ``postgres.conf`` (its server in Docker runs with it), by name."""
    found = {}
    for line in conf.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            name, value = (part.strip() for part in line.split("=", 1))
            if not name.startswith(NOT_TUNING):
                found[name] = value.strip("'")
    return found


class ServerSettings:
    """The harness's server settings applied to the local PostgreSQL for the run, and put back after.

    The harness's server runs with autovacuum on (naptime 60 s) and its own
    memory settings; a local server may run otherwise (this machine's has
    ``autovacuum = off``), and dead tuples, and the pickup latency of a long
    cell, depend on it. Settings PostgreSQL reloads are set with ``ALTER
    SYSTEM`` and ``pg_reload_conf()``; those that need a restart
    (``shared_buffers``, ``max_connections``) are reported, not changed.
    :meth:`restore` puts back each setting's earlier ``ALTER SYSTEM`` value,
    or resets it.
    """

    def __init__(self, url: str, wanted: dict[str, str]) -> None:
        self.url = url
        self.wanted = wanted
        self.earlier: dict[str, str | None] = {}  # what postgresql.auto.conf held for each setting changed
        self.notes: list[str] = []

    def apply(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            auto = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE %s AND applied",
                    ["%postgresql.auto.conf"],
                ).fetchall()
            )
            for name, value in self.wanted.items():
                row = conn.execute("SELECT context FROM pg_settings WHERE name = %s", [name]).fetchone()
                if row is None:
                    self.notes.append(f"{name}: unknown to this server, not set")
                    continue
                if row[0] in ("postmaster", "internal"):
                    current = conn.execute(f"SHOW {name}").fetchone()[0]
                    if current != value:
                        self.notes.append(f"{name}: needs a restart, left at {current} (the harness: {value})")
                    continue
                self.earlier[name] = auto.get(name)
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")  # names and values from the harness's file
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(0.5)  # the postmaster signals its children; give them a moment
            shown = ", ".join(f"{n} = {conn.execute(f'SHOW {n}').fetchone()[0]}" for n in self.earlier)
            self.notes.insert(0, f"the harness's server settings applied: {shown}")

    def restore(self) -> None:
        if not self.earlier:
            return
        with psycopg.connect(self.url, autocommit=True) as conn:
            for name, value in self.earlier.items():
                if value is None:
                    conn.execute(f"ALTER SYSTEM RESET {name}")
                else:
                    conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        self.earlier = {}


# -- one cell ----------------------------------------------------------------


def server_url(database: str, base: str) -> str:
    return base.rsplit("/", 1)[0] + "/" + database


def recreate_database(base: str, name: str) -> None:
    with psycopg.connect(server_url("postgres", base), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


TICK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent's pid, CPU ticks in user and system mode) of a process, or None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


class CpuMeter:
    """The CPU time of an adapter's processes (it and its descendants) and of the backends serving its database.

    Read every 2 s by the sampler; a process that exits keeps its last
    reading, so the totals only grow. Confined to the sampler's thread until
    it is joined.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self.adapter: dict[int, int] = {}  # pid -> ticks
        self.server: dict[int, int] = {}

    def read(self, backends: list[int]) -> tuple[float, float]:
        stats = {pid: stat for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if (stat := proc_stat(pid))}
        ours = {self.root}
        grew = True
        while grew:  # the adapter's descendants (our workers have sessions of their own)
            found = {pid for pid, (parent, _) in stats.items() if parent in ours}
            grew = not found <= ours
            ours |= found
        for pid in ours & stats.keys():
            self.adapter[pid] = stats[pid][1]
        for pid in backends:
            if pid in stats:
                self.server[pid] = stats[pid][1]
        return sum(self.adapter.values()) / TICK, sum(self.server.values()) / TICK


def sample_server(
    url: str, database: str, tables: list[str], result: Result, stop: threading.Event, meter: CpuMeter, started: float
) -> None:
    """Every 2 s: dead tuples of the event tables, the share of the database's active sessions on Lock:object, CPU."""
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.wait(2.0):
            known = [t for t in tables if "." in t]
            if known:
                dead, live = conn.execute(
                    "SELECT coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(n_live_tup), 0)::bigint FROM pg_stat_user_tables"
                    " WHERE schemaname || '.' || relname = ANY(%s)",
                    [known],
                ).fetchone()
                result.dead_tuples.append(int(dead))
                result.dead_share.append(dead / (dead + live) if dead + live else 0.0)
            active, locked = conn.execute(
                "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock' AND wait_event = 'object')"
                " FROM pg_stat_activity WHERE datname = %s AND state = 'active' AND pid <> pg_backend_pid()",
                [database],
            ).fetchone()
            if active:
                result.lock_waits.append(locked / active)
            backends = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", [database]
            ).fetchall()
            result.cpu.append((time.monotonic() - started, *meter.read([pid for (pid,) in backends])))


def harness_env() -> dict[str, str]:
    """The environment the harness gives every adapter (its job: 1 ms of work, 256 bytes), on this one's."""
    return dict(
        os.environ,
        SCENARIO="long_horizon",
        SAMPLE_EVERY_S=str(SAMPLE_EVERY_S),
        JOB_WORK_MS="1",
        JOB_PAYLOAD_BYTES="256",
        PRODUCER_BATCH_MAX="128",
        PRODUCER_BATCH_MS="10",
        PYTHONPATH=str(ROOT),
    )


def run_cell(
    system: str, cell: Cell, round_: int, base: str, work: Path, harness: Path, logs: Path, suffix: str
) -> Result:
    command, cwd, manifest_path = launch_spec(system, work, harness)
    manifest = json.loads(manifest_path.read_text())
    database = manifest["db_name"] + suffix
    recreate_database(base, database)
    url = server_url(database, base)
    env = {**harness_env(), "DATABASE_URL": url, **cell.env}
    result = Result(system, cell.name, round_, warmup=cell.warmup)
    slug = "".join(c if c.isalnum() else "_" for c in cell.name)
    with open(logs / f"{system}-{slug}-{round_}.log", "wb") as log:
        run_adapter(command, cwd, env, log, manifest, url, database, cell, result)
    return result


def run_adapter(
    command: list[str],
    cwd: Path,
    env: dict[str, str],
    log: Any,
    manifest: dict[str, Any],
    url: str,
    database: str,
    cell: Cell,
    result: Result,
) -> None:
    """Start the adapter, read its samples for the cell's length, then SIGTERM it (it must exit 0)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    stop = threading.Event()
    tables = list(manifest["event_tables"])
    sampler: threading.Thread | None = None

    def read() -> None:
        nonlocal sampler
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("kind") == "descriptor":
                # The runtime descriptor's tables (pg-boss names its queue's partition there).
                tables[:] = sorted(set(tables) | set(record.get("event_tables", [])))
                sampler = threading.Thread(
                    target=sample_server, args=(url, database, tables, result, stop, meter, started)
                )
                sampler.start()
            elif record.get("kind") == "adapter" and (elapsed := time.monotonic() - started) >= cell.warmup:
                result.samples.setdefault(record["metric"], []).append(float(record["value"]))
                result.series.append((elapsed, record["metric"], float(record["value"])))

    meter = CpuMeter(proc.pid)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        time.sleep(cell.seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            result.exit_code = proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            result.exit_code = proc.wait()
        stop.set()
        reader.join(10)
        if sampler is not None:
            sampler.join(10)


# -- the report ----------------------------------------------------------------


def report(results: list[Result]) -> str:
    lines = [
        "| cell | system | completions/s | enqueued/s | pickup p50 / p95 / p99 ms | queue depth | "
        "peak dead tuples (share) | Lock:object waits | CPU ms per job: adapter / PostgreSQL | rounds |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by_cell: dict[tuple[str, str], list[Result]] = {}
    for result in results:
        by_cell.setdefault((result.cell, result.system), []).append(result)
    for (cell, system), rounds in by_cell.items():

        def med(metric: str, rounds: list[Result] = rounds) -> float | None:
            values = [v for r in rounds if (v := r.median(metric)) is not None]
            return statistics.median(values) if values else None

        peak = max((max(r.dead_tuples, default=0) for r in rounds), default=0)
        share = max((max(r.dead_share, default=0.0) for r in rounds), default=0.0)
        waits = [statistics.mean(r.lock_waits) for r in rounds if r.lock_waits]
        failed = [r.exit_code for r in rounds if r.exit_code not in (0, None)]
        costs = [c for r in rounds if (c := r.cpu_per_job(r.warmup)) is not None]
        cpu = (
            f"{statistics.median(a for a, _ in costs):.2f} / {statistics.median(b for _, b in costs):.2f}"
            if costs
            else "-"
        )
        latency = " / ".join(fmt(med(m), 1) for m in ("claim_p50_ms", "claim_p95_ms", "claim_p99_ms"))
        lines.append(
            f"| {cell} | {system} | {fmt(med('completion_rate'))} | {fmt(med('enqueue_rate'))} | {latency} | "
            f"{fmt(med('queue_depth'))} | {peak:,} ({share:.0%}) | "
            f"{fmt(statistics.median(waits) * 100 if waits else None)} % | {cpu} | {len(rounds)}"
            + (f" (exit codes {failed})" if failed else "")
            + " |"
        )
    return "\n".join(lines)


def drift(results: list[Result], minutes: float = 10.0) -> str:
    """Long cells: the first and the last ``minutes`` after the warm-up, side by side (the harness's flatness check)."""
    lines = []
    for result in results:
        if not result.cell.startswith("long") or not result.series:
            continue
        start, end = result.series[0][0], result.series[-1][0]

        def window(metric: str, low: float, high: float, result: Result = result) -> float | None:
            values = [v for at, m, v in result.series if m == metric and low <= at <= high]
            return statistics.median(values) if values else None

        for metric in ("completion_rate", "claim_p99_ms"):
            first = window(metric, start, start + minutes * 60)
            last = window(metric, end - minutes * 60, end)
            change = f"{(last / first - 1) * 100:+.1f} %" if first and last is not None else "-"
            lines.append(
                f"{result.system}, {result.cell}, {metric}: first {minutes:g} min {fmt(first, 1)}, "
                f"last {minutes:g} min {fmt(last, 1)} ({change})"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--work", type=Path, default=Path("/tmp/owf-harness"))
    parser.add_argument("--harness-source", default=HARNESS_REPO, help="where to clone the harness from")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=95.0, help="per cell, warm-up included")
    parser.add_argument(
        "--warmup", type=float, default=35.0, help="samples before this are left out (the pickup window is 30 s)"
    )
    parser.add_argument("--quick", action="store_true", help="one round of 20 s cells: a check that all runs")
    parser.add_argument("--only", default="", help="cells whose name contains this")
    parser.add_argument("--long", type=float, default=0.0, metavar="MINUTES", help="add the long-horizon cell")
    parser.add_argument("--long-rate", type=int, default=200, help="jobs/s offered in the long-horizon cell")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument(
        "--db-suffix", default="", help="appended to each adapter's database name (a server shared with others)"
    )
    parser.add_argument(
        "--server-as-is",
        action="store_true",
        help="leave the server's settings alone (by default the harness's postgres.conf is applied for the run)",
    )
    chaos = parser.add_argument_group("the harness's phased scenarios, B to G: phases.py")
    chaos.add_argument("--phase", default="", help="B to G, or several (B,C): every scenario of those phases")
    chaos.add_argument("--scenario", default="", help=f"comma-separated, of: {', '.join(phases.SCENARIOS)}")
    chaos.add_argument("--time-scale", type=float, default=1.0, help="every phase's length times this (0.5: halves)")
    chaos.add_argument(
        "--minutes",
        type=float,
        default=0.0,
        help="the long phase of starvation_60min and soak_6h, in minutes (default: its length times --time-scale)",
    )
    chaos.add_argument("--rate", type=float, default=0.0, help="jobs/s per replica (default: the harness's per cell)")
    chaos.add_argument("--workers", type=int, default=0, help="WORKER_COUNT (default: the harness's per cell)")
    chaos.add_argument(
        "--idle-conns", type=int, help="pool-exhaustion's idle sessions (default: 3/4 of max_connections)"
    )
    chaos.add_argument(
        "--own-server",
        action="store_true",
        help="the server is this script's own: postgres-restart may stop and start it (pg_ctlcluster 15 main)",
    )
    args = parser.parse_args()
    if args.phase or args.scenario:
        return run_phases(args)
    if args.quick:
        args.rounds, args.seconds, args.warmup = 1, 20.0, 5.0
    systems = [s for s in args.systems.split(",") if s]
    harness = install(args.work, args.harness_source, systems)
    logs = args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells(args.seconds, args.warmup, args.long, args.long_rate) if args.only in c.name]
    results: list[Result] = []
    load = os.getloadavg()
    # Ours alone (CI's check) needs no harness checkout, and leaves the server as it is.
    conf = harness / "postgres.conf"
    server = ServerSettings(args.database_url, {} if args.server_as_is or not conf.exists() else harness_settings(conf))
    # SIGTERM (a timeout, a CI runner) unwinds through the finally below, so the settings are put back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if server.wanted:
            server.apply()
        for round_ in range(args.rounds):
            for cell in todo:
                turned = systems[round_ % len(systems) :] + systems[: round_ % len(systems)]
                for system in turned:
                    print(f"[round {round_ + 1}] {cell.name}: {system}", file=sys.stderr, flush=True)
                    results.append(
                        run_cell(system, cell, round_, args.database_url, args.work, harness, logs, args.db_suffix)
                    )
    finally:
        server.restore()
    print(f"\nload average at the start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}; logs in {logs}")
    for note in server.notes or ["the server's settings as they were (no harness postgres.conf applied)"]:
        print(f"server: {note}")
    print()
    print(report(results))
    if flat := drift(results):
        print("\n" + flat)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    broken = [r for r in results if r.exit_code != 0 or not r.samples.keys() >= REQUIRED_METRICS]
    for r in broken:
        missing = sorted(REQUIRED_METRICS - r.samples.keys())
        print(f"{r.system}, {r.cell}: exit code {r.exit_code}, metrics missing {missing}", file=sys.stderr)
    return 1 if broken else 0


def run_phases(args: argparse.Namespace) -> int:
    """The chaos and pressure cells: each scenario, each system in an order that turns per scenario."""
    todo = phases.chosen(args.scenario, args.phase)
    restarts = [s.name for s in todo if any(p.kind == "postgres-restart" for p in s.phases)]
    if restarts and not args.own_server:
        raise SystemExit(
            f"{', '.join(restarts)} stops and starts the PostgreSQL server: pass --own-server only where the server"
            " is this script's to restart (as on CI), or leave those scenarios out (--scenario)"
        )
    systems = [s for s in args.systems.split(",") if s]
    harness = install(args.work, args.harness_source, systems)
    logs = args.work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = harness_env()
    conf = harness / "postgres.conf"
    server = ServerSettings(args.database_url, {} if args.server_as_is or not conf.exists() else harness_settings(conf))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: list[phases.CellResult] = []
    skipped: list[str] = []
    try:
        faults.wait_while_busy("changing the server's settings")
        if server.wanted:
            server.apply()
        for n, scenario in enumerate(todo):
            scenario = scenario.scaled(args.time_scale, 30.0, args.minutes)
            for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
                if missing := {k for k, _ in scenario.env} - KNOBS[system]:
                    skipped.append(f"{system}, {scenario.name}: not run, its adapter reads none of {sorted(missing)}")
                    print(f"[phases] {skipped[-1]}", file=sys.stderr, flush=True)
                    continue
                launch = launch_spec(system, args.work, harness)
                results.append(phases.run_cell(system, scenario, launch, args.database_url, logs, args, env))
                phases.save(results, args.json)
                print(phases.report(results[-1:]), file=sys.stderr, flush=True)
    finally:
        server.restore()
    print(f"\nlogs in {logs}; machine: {os.cpu_count()} cores")
    for note in server.notes or ["the server's settings as they were (no harness postgres.conf applied)"]:
        print(f"server: {note}")
    print()
    print(phases.report(results))
    for line in skipped:
        print(line)
    return 1 if any(r.aborted or not r.clean_shutdown() for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
