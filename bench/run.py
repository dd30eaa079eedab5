#!/usr/bin/env python
"""django-openworkflow benchmark suite: figures, not tests (see bench/README.md).

    python bench/run.py [--db postgres|sqlite|mariadb|all] [--quick] [--only throughput,latency,...]
    python bench/run.py --peer-protocol --only throughput,latency     (what bench/compare.sh runs)

Prints one ``<db>.<figure> <value> <unit>`` line per figure as it is measured,
then ``RESULT peer=ours ...`` lines with the fields of
../shared/bench-peers/common.py's ``result_line`` (one per configuration), so
the peers' ``summarize.py`` and ``bench/compare.py`` can put them side by side.

Phases (each starts from empty tables):
  throughput  ONE `runworkflows` subprocess (idle first) + a producer subprocess starting N
              runs one `spec.run()` at a time; wall = first start -> max(finished_at).
              Also a prefill variant (runs inserted before the worker starts).
              Commits per step/workflow are measured over the same window.
  latency     idle worker, sequential 1-step runs after a random idle gap:
              start -> finished_at (server) and start -> handle.result() returned.
  replay      in-process: per-step cost of a 1,000-step run vs a 10-step one.
  claims      claim latency with 1M finished + 10k parked runs vs an empty table.
  memory      worker RSS after 1k and after 50k completed runs.

Exit status: 0 when every phase ran and every run completed; 1 otherwise.
Timing targets are never asserted here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from contextlib import suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PHASES = ("throughput", "latency", "replay", "claims", "memory")
NAN = float("nan")

WORKER_APP = "owf-bench-worker"
PRODUCER_APP = "owf-bench-producer"
MONITOR_APP = "owf-bench-monitor"


# --------------------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("role", nargs="?", default="main", choices=["main", "_produce"], help=argparse.SUPPRESS)
    p.add_argument("--db", default=os.environ.get("BENCH_DB", "postgres"), choices=[*BENCH_DBS, "all"])
    p.add_argument("--quick", action="store_true", help="small sizes (CI smoke test, < ~2 min per database)")
    p.add_argument("--only", default=",".join(PHASES), help=f"comma-separated phases: {','.join(PHASES)}")
    p.add_argument(
        "--peer-protocol",
        action="store_true",
        help="throughput/latency in the exact shapes of ../shared/bench-peers (2,000 x 3 steps at "
        "concurrency 20 and 100, prefill at 20; 50 latency samples with a 0-1 s gap)",
    )
    p.add_argument("--n", type=int, default=None, help="override the number of runs of every throughput config")
    p.add_argument("--lat-n", type=int, default=None, help="override the number of latency samples")
    p.add_argument("--gap-ms", type=int, default=None, help="override the max random idle gap before a latency sample")
    p.add_argument("--poll", default="100ms", help="worker --poll (default 100ms)")
    p.add_argument("--no-cap", action="store_true", help="do not lower concurrency to fit the server's max_connections")
    p.add_argument("--timeout", type=float, default=None, help="per-phase timeout in seconds")
    p.add_argument("--keep-db", action="store_true", help="SQLite: keep bench/bench.sqlite3 after the run")
    p.add_argument("--tag", default="", help="extra key=value fields appended to RESULT lines")
    p.add_argument("--profile", default=None, help="py-spy record the worker of each throughput config into this dir")
    # producer-only options
    p.add_argument("--workflow", default="bench-3", help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --------------------------------------------------------------------------- small helpers


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile (same definition as bench-peers/common.py)."""
    s = sorted(xs)
    if not s:
        return NAN
    idx = min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))
    return s[idx]


def fmt(x: float | None, d: int = 1) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "nan"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{d}f}"


def cpu_sample() -> tuple[int, int]:
    """(busy jiffies, total jiffies) over all cores, from /proc/stat."""
    with open("/proc/stat") as fh:
        f = [int(x) for x in fh.readline().split()[1:]]
    total = sum(f[:8])
    return total - (f[3] + f[4]), total


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return NAN


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return NAN


def read_commits(path: Path | None) -> int:
    """Transactions counted by bench.benchapp's hook in one process (0 if it wrote nothing)."""
    try:
        with open(path) as fh:  # type: ignore[arg-type]
            return int(json.load(fh)["commits"])
    except (TypeError, OSError, ValueError, KeyError):
        return 0


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return NAN


def to_epoch(value) -> float:  # type: ignore[no-untyped-def]
    """A timestamp from either backend (aware datetime, or SQLite text in UTC) as epoch seconds."""
    if value is None:
        return NAN
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


# --------------------------------------------------------------------------- producer (subprocess)


def produce(args: argparse.Namespace) -> None:
    """Start ``--count`` runs one ``spec.run()`` at a time, after a GO on stdin.

    With ``--batch B``, every B starts share one transaction (used only to fill
    the memory phase quickly). Prints one JSON line with the timings.
    """
    import django

    django.setup()
    from django.db import connections, transaction

    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.registry import registry

    spec = registry.latest(args.workflow)
    WorkflowRun.objects.exists()  # connect and warm up before the clock starts
    print("READY", flush=True)
    sys.stdin.readline()
    n, batch = args.count, args.batch
    t_first = time.time()
    p0 = time.perf_counter()
    if batch:
        for lo in range(0, n, batch):
            with transaction.atomic():
                for i in range(lo, min(n, lo + batch)):
                    spec.run(i)
    else:
        for i in range(n):
            spec.run(i)
    enqueue_s = time.perf_counter() - p0
    connections.close_all()
    print(json.dumps({"t_first": t_first, "enqueue_s": enqueue_s, "n": n}), flush=True)


# --------------------------------------------------------------------------- the bench databases


def per_run(total: float, done: int, steps_done: int) -> dict:
    return {
        "commits": total,
        "commits_per_wf": total / done,
        "commits_per_step": total / steps_done if steps_done else NAN,
    }


class BenchDB:
    """Everything that differs between the bench databases; the orchestrator asks this, never ``--db``.

    One subclass per database: :class:`PostgresDB`, :class:`SQLiteDB`, :class:`MariaDB`.
    """

    name = ""  # the --db value
    short = ""  # prefix of the figure lines: ``<short>.thr...``
    cfg_prefix = ""  # prefix of the RESULT lines' cfg=
    placeholder = "%s"  # parameter style of raw()'s connections
    counts_in_process = False  # no server counters: bench.benchapp's hook counts commits in the worker/producer
    analyze_sql = "ANALYZE"
    # (result key, figure, unit) printed after each throughput configuration, when measured
    commit_lines: tuple[tuple[str, str, str], ...] = ()

    def __init__(self, note) -> None:  # type: ignore[no-untyped-def]
        self.note = note
        self.settings_db: dict = {}
        self.max_connections = 0

    def prepare(self, settings_db: dict) -> None:
        """Before ``migrate``: make sure the database exists (or start from a new one)."""
        self.settings_db = settings_db

    def open(self) -> None:
        """After ``migrate``: open the statistics connection, if any, and say what the server is."""

    def raw(self):  # type: ignore[no-untyped-def]
        """A fresh autocommit connection to the bench database, outside Django (for polling)."""
        raise NotImplementedError

    def empty_tables(self, connection, quoted: list[str]) -> None:  # type: ignore[no-untyped-def]
        with connection.constraint_checks_disabled(), connection.cursor() as cur:
            for table in quoted:
                cur.execute(f"DELETE FROM {table}")

    def filler_exprs(self) -> dict:
        """SQL for the claim-scaling filler: 'past', 'future', 'due' timestamps, 'now', 'uid' (a fresh id)."""
        raise NotImplementedError

    def insert_series(self, insert: str, params: list, count: int) -> tuple[str, list]:
        """``insert`` (an ``INSERT ... SELECT`` without FROM) over ``count`` generated rows named ``g``."""
        raise NotImplementedError

    def sessions(self) -> list[tuple[str, int]]:
        """(who, count) of the sessions connected to the bench database (none known: [])."""
        return []

    def headroom(self) -> int | None:
        """Connections still free on the server; None when there is no such limit."""
        return None

    def mark(self) -> dict | None:
        """Server counters at one instant (None: no server counters)."""
        return None

    def settle(self, apps: tuple[str, ...]) -> None:
        """Wait until the sessions of these application names have flushed their statistics."""

    def commit_figures(  # type: ignore[no-untyped-def]
        self, m0: dict | None, m1: dict | None, polls: int, counted: int, done: int, steps_done: int
    ):
        """The ``commits*`` / ``write_txn_per_wf`` fields of a throughput result (``done`` > 0).

        ``m0``/``m1``: :meth:`mark` before/after; ``polls``: the monitor's polling queries in
        between; ``counted``: commits counted in-process (``counts_in_process``).
        """
        return {}

    def close(self, keep: bool) -> None:
        pass


class PostgresDB(BenchDB):
    name, short, cfg_prefix = "postgres", "pg", "ours"
    analyze_sql = "ANALYZE openworkflow_run"
    commit_lines = (
        ("commits_per_step", "per_step", "commits/step (pg_stat_database.xact_commit)"),
        ("commits_per_wf", "per_wf", "commits/wf"),
        ("write_txn_per_wf", "write_txn_per_wf", "write-txn/wf (xid delta, cluster-wide)"),
        ("wal_kb_per_wf", "wal_kb_per_wf", "KiB/wf (cluster-wide)"),
    )

    def __init__(self, note) -> None:  # type: ignore[no-untyped-def]
        super().__init__(note)
        self.stats_conn = None  # a connection to the `postgres` database (stats, xids)

    def _connect(self, dbname: str, app: str):  # type: ignore[no-untyped-def]
        import psycopg

        s = self.settings_db
        params = {
            "dbname": dbname,
            "user": s.get("USER") or None,
            "password": s.get("PASSWORD") or None,
            "host": s.get("HOST") or None,
            "port": s.get("PORT") or None,
        }
        params = {k: v for k, v in params.items() if v not in (None, "")}
        return psycopg.connect(**params, autocommit=True, application_name=app)

    def prepare(self, settings_db: dict) -> None:
        from psycopg import sql

        super().prepare(settings_db)
        name = settings_db["NAME"]
        with self._connect("postgres", MONITOR_APP) as conn:
            if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
                conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
                self.note(f"created database {name}")

    def open(self) -> None:
        self.stats_conn = self._connect("postgres", MONITOR_APP + "-stats")
        ver = self.stats_conn.execute("show server_version").fetchone()[0]
        self.max_connections = int(self.stats_conn.execute("show max_connections").fetchone()[0])
        self.note(f"PostgreSQL {ver}, database {self.settings_db['NAME']}, max_connections={self.max_connections}")

    def raw(self):  # type: ignore[no-untyped-def]
        return self._connect(self.settings_db["NAME"], MONITOR_APP)

    def empty_tables(self, connection, quoted: list[str]) -> None:  # type: ignore[no-untyped-def]
        with connection.cursor() as cur:
            cur.execute(f"TRUNCATE {', '.join(quoted)} CASCADE")

    def filler_exprs(self) -> dict:
        return {
            "past": "now() - interval '2 days' + g * interval '1 ms'",
            "future": "now() + interval '1 day' + g * interval '1 ms'",
            "due": "now() - interval '1 second'",
            "now": "now()",
            "uid": "gen_random_uuid()",
        }

    def insert_series(self, insert: str, params: list, count: int) -> tuple[str, list]:
        return f"{insert} FROM generate_series(1, %s) AS g", [*params, count]

    def sessions(self) -> list[tuple[str, int]]:
        return self.stats_conn.execute(
            "select coalesce(nullif(application_name, ''), '?'), count(*) from pg_stat_activity "
            "where datname = %s group by 1",
            (self.settings_db["NAME"],),
        ).fetchall()

    def headroom(self) -> int | None:
        used = self.stats_conn.execute(
            "select count(*) from pg_stat_activity where backend_type = 'client backend'"
        ).fetchone()[0]
        return self.max_connections - used

    def mark(self) -> dict | None:
        row = self.stats_conn.execute(
            "select xact_commit, xact_rollback, txid_snapshot_xmax(txid_current_snapshot()), "
            "pg_current_wal_lsn()::text from pg_stat_database where datname = %s",
            (self.settings_db["NAME"],),
        ).fetchone()
        return {"commit": row[0], "rollback": row[1], "xid": row[2], "lsn": row[3]}

    def settle(self, apps: tuple[str, ...], timeout: float = 10.0) -> None:
        """Backends flush their pg_stat_database counters when they exit: wait for them to be gone."""
        give_up = time.monotonic() + timeout
        while time.monotonic() < give_up:
            n = self.stats_conn.execute(
                "select count(*) from pg_stat_activity where datname = %s and application_name = any(%s)",
                (self.settings_db["NAME"], list(apps)),
            ).fetchone()[0]
            if not n:
                return
            time.sleep(0.05)
        self.note(f"backends of {apps} still present after {timeout}s; commit counts may be slightly off")

    def commit_figures(self, m0, m1, polls, counted, done, steps_done):  # type: ignore[no-untyped-def]
        wal = self.stats_conn.execute(
            "select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (m1["lsn"], m0["lsn"])
        ).fetchone()[0]
        return {
            # every committed transaction of the bench database, minus the monitor's own polling queries
            **per_run((m1["commit"] - m0["commit"]) - polls, done, steps_done),
            "rollbacks": m1["rollback"] - m0["rollback"],
            "write_txn_per_wf": (m1["xid"] - m0["xid"]) / done,
            "wal_kb_per_wf": float(wal) / 1024.0 / done,
        }

    def close(self, keep: bool) -> None:
        if self.stats_conn is not None:
            with suppress(Exception):
                self.stats_conn.close()


class SQLiteDB(BenchDB):
    name, short, cfg_prefix = "sqlite", "sqlite", "ours_sqlite"
    placeholder = "?"
    counts_in_process = True
    commit_lines = (
        ("commits_per_step", "per_step", "commits/step (counted BEGIN+autocommit writes)"),
        ("commits_per_wf", "per_wf", "commits/wf"),
    )

    def _unlink(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            with suppress(OSError):
                os.unlink(str(self.settings_db["NAME"]) + suffix)

    def prepare(self, settings_db: dict) -> None:
        super().prepare(settings_db)
        self._unlink()  # a new file on every run

    def open(self) -> None:
        import sqlite3

        self.note(f"SQLite {sqlite3.sqlite_version}, {self.settings_db['NAME']}")

    def raw(self):  # type: ignore[no-untyped-def]
        import sqlite3

        return sqlite3.connect(self.settings_db["NAME"], timeout=20, isolation_level=None)

    def filler_exprs(self) -> dict:
        return {
            "past": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-2 days')",
            "future": "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 day')",
            "due": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 second')",
            "now": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            "uid": "lower(hex(randomblob(16)))",
        }

    def insert_series(self, insert: str, params: list, count: int) -> tuple[str, list]:
        return (
            f"WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < %s) {insert} FROM g",
            [count, *params],
        )

    def commit_figures(self, m0, m1, polls, counted, done, steps_done):  # type: ignore[no-untyped-def]
        figures = per_run(counted, done, steps_done)
        return {**figures, "write_txn_per_wf": figures["commits_per_wf"]}

    def close(self, keep: bool) -> None:
        if not keep:
            # The claim-scaling filler leaves a file of ~400 MB; it is recreated on every run anyway.
            from django.db import connections

            connections.close_all()
            self._unlink()


class MariaDB(BenchDB):
    """MariaDB (or MySQL): server-wide counters from SHOW GLOBAL STATUS.

    Which counter is a "write transaction"? Django runs every ``transaction.atomic()``
    block as autocommit off ... COMMIT, and everything else in autocommit:

    * ``Com_commit`` counts explicit COMMITs: one per atomic block (claims, including
      the read-only ones that found nothing, step and finish commits), none for a
      statement run in autocommit (the start INSERT of a run without idempotency key,
      lease extensions, the monitor's polls).
    * ``Handler_commit`` counts every commit InnoDB takes part in, *statement-level
      included*: each autocommit statement touching InnoDB (a plain SELECT too) counts
      1, and an explicit transaction counts 1 per statement plus 1 for its COMMIT.

    ``Handler_commit`` therefore measures statements, not transactions: the
    transactions the engine opens are ``Com_commit``, reported as ``commits`` and
    ``write_txn_per_wf``; ``Handler_commit`` (minus the monitor's polls) is reported
    beside it. Both, like ``Innodb_lsn_current`` (the redo log position), are
    server-wide: other sessions on the same server inflate them. GLOBAL STATUS sums
    the live sessions' counters, so unlike PostgreSQL there is nothing to wait for.
    """

    name, short, cfg_prefix = "mariadb", "mariadb", "ours_mariadb"
    analyze_sql = "ANALYZE TABLE openworkflow_run"
    commit_lines = (
        ("commits_per_step", "per_step", "commits/step (Com_commit: explicit COMMITs, server-wide)"),
        ("commits_per_wf", "per_wf", "commits/wf (Com_commit; = write_txn_per_wf)"),
        (
            "handler_commits_per_wf",
            "handler_commits_per_wf",
            "InnoDB commits/wf (Handler_commit: every statement + every COMMIT, server-wide)",
        ),
        ("redo_kb_per_wf", "redo_kb_per_wf", "KiB/wf (InnoDB redo log, Innodb_lsn_current delta, server-wide)"),
    )
    COUNTERS = ("Com_commit", "Com_rollback", "Handler_commit", "Innodb_lsn_current")

    def __init__(self, note) -> None:  # type: ignore[no-untyped-def]
        super().__init__(note)
        self.stats_conn = None  # a connection with no default database (not counted as a bench session)

    def _connect(self, database: str | None = None):  # type: ignore[no-untyped-def]
        import MySQLdb

        s = self.settings_db
        params = {
            "host": s.get("HOST") or None,
            "port": int(s["PORT"]) if s.get("PORT") else None,
            "user": s.get("USER") or None,
            "password": s.get("PASSWORD") or None,
            "database": database,
        }
        params = {k: v for k, v in params.items() if v not in (None, "")}
        return MySQLdb.connect(**params, charset="utf8mb4", autocommit=True)

    def _query(self, sql: str, params: tuple = ()) -> list:
        with self.stats_conn.cursor() as cur:
            cur.execute(sql, params or None)
            return list(cur.fetchall())

    def prepare(self, settings_db: dict) -> None:
        super().prepare(settings_db)
        name = settings_db["NAME"]
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,))
                if not cur.fetchall():
                    cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
                    self.note(f"created database {name}")
        finally:
            conn.close()

    def open(self) -> None:
        self.stats_conn = self._connect()
        ((ver, self.max_connections),) = self._query("SELECT VERSION(), @@max_connections")
        self.note(f"MariaDB {ver}, database {self.settings_db['NAME']}, max_connections={self.max_connections}")

    def raw(self):  # type: ignore[no-untyped-def]
        return self._connect(self.settings_db["NAME"])

    def empty_tables(self, connection, quoted: list[str]) -> None:  # type: ignore[no-untyped-def]
        # TRUNCATE (like PostgreSQL): instant on a million rows; with foreign_key_checks off, as
        # InnoDB refuses to truncate a table other tables reference otherwise.
        with connection.constraint_checks_disabled(), connection.cursor() as cur:
            for table in quoted:
                cur.execute(f"TRUNCATE TABLE {table}")

    def filler_exprs(self) -> dict:
        # DATETIME(6) columns hold UTC (Django's USE_TZ on MySQL); ids are 32 hex digits (char(32)).
        return {
            "past": "UTC_TIMESTAMP(6) - INTERVAL 2 DAY + INTERVAL (g.seq * 1000) MICROSECOND",
            "future": "UTC_TIMESTAMP(6) + INTERVAL 1 DAY + INTERVAL (g.seq * 1000) MICROSECOND",
            "due": "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
            "now": "UTC_TIMESTAMP(6)",
            "uid": "REPLACE(UUID(), '-', '')",
        }

    def insert_series(self, insert: str, params: list, count: int) -> tuple[str, list]:
        # MariaDB's SEQUENCE engine (a recursive CTE stops at max_recursive_iterations = 1000).
        return f"{insert} FROM seq_1_to_{int(count)} AS g", params

    def sessions(self) -> list[tuple[str, int]]:
        # MariaDB has no application_name: say who by user and state.
        return self._query(
            "SELECT CONCAT(user, ' (', command, ')'), COUNT(*) FROM information_schema.processlist "
            "WHERE db = %s AND id <> CONNECTION_ID() GROUP BY 1",
            (self.settings_db["NAME"],),
        )

    def headroom(self) -> int | None:
        ((used,),) = self._query(
            "SELECT variable_value FROM information_schema.global_status WHERE variable_name = 'THREADS_CONNECTED'"
        )
        return int(self.max_connections) - int(used)

    def mark(self) -> dict | None:
        names = ", ".join(f"'{c}'" for c in self.COUNTERS)
        rows = self._query(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
        return {name: int(value) for name, value in rows}

    def commit_figures(self, m0, m1, polls, counted, done, steps_done):  # type: ignore[no-untyped-def]
        def delta(name: str) -> int:
            return m1[name] - m0[name]

        figures = per_run(delta("Com_commit"), done, steps_done)  # the monitor's autocommit polls do not COMMIT
        return {
            **figures,
            "rollbacks": delta("Com_rollback"),
            "write_txn_per_wf": figures["commits_per_wf"],
            # each of the monitor's polls is one autocommit SELECT on an InnoDB table: one Handler_commit
            "handler_commits_per_wf": (delta("Handler_commit") - polls) / done,
            "redo_kb_per_wf": delta("Innodb_lsn_current") / 1024.0 / done,
        }

    def close(self, keep: bool) -> None:
        if self.stats_conn is not None:
            with suppress(Exception):
                self.stats_conn.close()


BENCH_DBS = {cls.name: cls for cls in (PostgresDB, SQLiteDB, MariaDB)}


# --------------------------------------------------------------------------- the orchestrator


class PhaseError(Exception):
    pass


class Bench:
    def __init__(self, args: argparse.Namespace, db: str) -> None:
        self.args = args
        self.db = db
        self.dbh: BenchDB = BENCH_DBS[db](self.note)
        self.short = self.dbh.short
        self.quick = args.quick
        self.tmp = Path(tempfile.mkdtemp(prefix=f"owf-bench-{self.short}-"))
        self.children: list[subprocess.Popen] = []
        self.results: list[str] = []
        self.ok = True
        self.timeout = args.timeout or (240.0 if self.quick else 900.0)
        self.stall = 30.0 if self.quick else 60.0  # no run finished for this long: give the phase up

    # ---- output

    def emit(self, name: str, value, unit: str, d: int = 1) -> None:  # type: ignore[no-untyped-def]
        print(f"{self.short}.{name} {fmt(value, d)} {unit}", flush=True)

    def note(self, text: str) -> None:
        print(f"# {self.short}: {text}", flush=True)

    # ---- database setup

    def setup(self) -> None:
        import django
        from django.conf import settings

        django.setup()
        self.settings_db = settings.DATABASES["default"]
        self.dbh.prepare(self.settings_db)
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        self.dbh.open()

    def raw(self):  # type: ignore[no-untyped-def]
        """A fresh autocommit connection to the bench database, outside Django (for polling)."""
        return self.dbh.raw()

    def q(self, conn, sql: str, params: tuple = ()):  # type: ignore[no-untyped-def]
        sql = sql.replace("%s", self.dbh.placeholder)
        cur = conn.cursor()
        try:
            cur.execute(sql, params) if params else cur.execute(sql)
            return cur.fetchall() if cur.description else None
        finally:
            cur.close()

    def reset_tables(self) -> None:
        """Empty every table of django_openworkflow (whatever tables the engine has grown)."""
        from django.apps import apps
        from django.db import connection, connections

        tables = [m._meta.db_table for m in apps.get_app_config("django_openworkflow").get_models()]
        tables += [
            f.remote_field.through._meta.db_table
            for m in apps.get_app_config("django_openworkflow").get_models()
            for f in m._meta.local_many_to_many
        ]
        quoted = [connection.ops.quote_name(t) for t in dict.fromkeys(tables)]
        self.dbh.empty_tables(connection, quoted)
        connections.close_all()

    def check_foreign_sessions(self, label: str) -> None:
        """Warn when something else is connected to the bench database (e.g. a stray worker
        that would claim the benchmark's runs). Our own closed connections may linger a moment."""
        give_up = time.monotonic() + 3.0
        while True:
            rows = self.dbh.sessions()
            if not rows:
                return
            if time.monotonic() > give_up:
                break
            time.sleep(0.05)
        who = ", ".join(f"{n} x {app}" for app, n in rows)
        self.note(f"{label}: other sessions are connected to the bench database ({who}); figures may be off")

    # ---- subprocesses

    def child_env(self, **extra: str) -> dict:
        env = dict(os.environ)
        env["BENCH_DB"] = self.db
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        for key in ("BENCH_READY_FILE", "BENCH_COUNT_FILE"):
            env.pop(key, None)
        env.update(extra)
        return env

    def effective_concurrency(self, conc: int) -> int:
        free = self.dbh.headroom()
        if free is None or self.args.no_cap:
            return conc
        # worker: one connection per slot + claim loop + heartbeat + LISTEN; plus the producer; and
        # leave a margin of 15 for the other sessions sharing the server (test suites, other benches).
        room = free - 1 - 15
        if conc + 3 > room:
            capped = max(1, room - 3)
            self.note(
                f"concurrency {conc} needs ~{conc + 3} connections but only ~{room} are free "
                f"(max_connections={self.dbh.max_connections}); running at concurrency {capped} "
                "(pass --no-cap to try anyway, or raise max_connections)"
            )
            return capped
        return conc

    def spawn_worker(self, conc: int, label: str, count_file: Path | None = None) -> tuple[subprocess.Popen, Path]:
        """Start ``runworkflows``; returns it and the file it touches at its first connection."""
        ready = self.tmp / f"ready-{label}"
        with suppress(FileNotFoundError):
            ready.unlink()
        extra = {"BENCH_READY_FILE": str(ready), "BENCH_APP_NAME": WORKER_APP}
        if count_file is not None:
            extra["BENCH_COUNT_FILE"] = str(count_file)
        cmd = [
            sys.executable,
            "-m",
            "django",
            "runworkflows",
            "--settings=bench.settings",
            "--concurrency",
            str(conc),
            "--poll",
            self.args.poll,
        ]
        log_path = self.tmp / f"worker-{label}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.child_env(**extra), stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = str(log_path)  # type: ignore[attr-defined]
        self.children.append(proc)
        return proc, ready

    def start_worker(self, conc: int, label: str, count_file: Path | None = None) -> subprocess.Popen:
        """Start a worker and wait until it is in its loop, then leave it idle for a second."""
        proc, ready = self.spawn_worker(conc, label, count_file)
        give_up = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None:
                raise PhaseError(f"worker exited with {proc.returncode} before it was ready:\n{self.tail(proc)}")
            if time.monotonic() > give_up:
                raise PhaseError("worker not ready after 60 s")
            time.sleep(0.02)
        time.sleep(1.0)  # started and left idle first
        if proc.poll() is not None:
            raise PhaseError(f"worker exited with {proc.returncode}:\n{self.tail(proc)}")
        return proc

    def tail(self, proc: subprocess.Popen, lines: int = 15) -> str:
        path = getattr(proc, "log_path", None)
        if not path:
            return ""
        with suppress(OSError), open(path) as fh:
            return "".join(fh.readlines()[-lines:])
        return ""

    def stop(self, proc: subprocess.Popen, timeout: float = 30.0) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.note(f"pid {proc.pid} did not stop within {timeout}s after SIGTERM; killing it")
                proc.kill()
                proc.wait(10)
        if proc in self.children:
            self.children.remove(proc)

    def kill_children(self) -> None:
        for proc in list(self.children):
            if proc.poll() is None:
                with suppress(ProcessLookupError):
                    proc.kill()
                with suppress(Exception):
                    proc.wait(10)
            self.children.remove(proc)

    def start_producer(self, workflow: str, n: int, batch: int = 0, count_file: Path | None = None) -> subprocess.Popen:
        extra = {"BENCH_APP_NAME": PRODUCER_APP}
        if count_file is not None:
            extra["BENCH_COUNT_FILE"] = str(count_file)
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "_produce",
            "--db",
            self.db,
            "--workflow",
            workflow,
            "--count",
            str(n),
            "--batch",
            str(batch),
        ]
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=self.child_env(**extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.children.append(proc)
        line = proc.stdout.readline()
        if "READY" not in line:
            proc.wait(10)
            raise PhaseError(f"producer failed to start (rc={proc.returncode}): {line!r}")
        return proc

    def go(self, proc: subprocess.Popen) -> None:
        proc.stdin.write("GO\n")
        proc.stdin.flush()

    def producer_result(self, proc: subprocess.Popen, timeout: float) -> dict:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise PhaseError("producer timed out") from None
        finally:
            if proc in self.children:
                self.children.remove(proc)
        if proc.returncode != 0:
            raise PhaseError(f"producer exited with {proc.returncode}")
        return json.loads(out.strip().splitlines()[-1])

    # ---- throughput

    def throughput(self, label: str, workflow: str, steps: int, n: int, conc: int, mode: str) -> dict:
        """One throughput configuration; returns the RESULT fields."""
        self.reset_tables()
        self.check_foreign_sessions(label)
        load_before = loadavg()
        conc_eff = self.effective_concurrency(conc)
        count_dir = self.tmp / f"counts-{label}"
        count_dir.mkdir(exist_ok=True)
        counting = self.dbh.counts_in_process
        wcount = count_dir / "worker.json" if counting else None
        pcount = count_dir / "producer.json" if counting else None
        worker = None
        profiler = None
        if mode == "live":
            worker = self.start_worker(conc_eff, label, wcount)
            if self.args.profile:
                profiler = self.start_profiler(worker.pid, label)
        producer = self.start_producer(workflow, n, count_file=pcount)

        def begin() -> tuple:
            return (
                cpu_sample(),
                self.dbh.mark(),
                proc_cpu_s(worker.pid) if worker else NAN,
                time.time(),
            )

        mon = self.raw()  # opened before the window: with --no-cap the server may run out of connections
        if mode == "live":
            c0, m0, w0, _ = begin()
            self.go(producer)
            prod = self.producer_result(producer, self.timeout)
        else:
            self.go(producer)
            prod = self.producer_result(producer, self.timeout)
            self.dbh.settle((PRODUCER_APP,))
            c0, m0, _, _ = begin()
            worker, ready = self.spawn_worker(conc_eff, label, wcount)
            w0 = NAN
            give_up = time.monotonic() + 60
            while worker.poll() is None and time.monotonic() < give_up:
                if ready.exists():  # first connection: it is about to claim
                    w0 = proc_cpu_s(worker.pid)
                    break
                time.sleep(0.002)
        if self.args.profile and profiler is None:
            profiler = self.start_profiler(worker.pid, label)

        polls = 0
        give_up = time.monotonic() + self.timeout
        done = failed = 0
        last_progress, last_count = time.monotonic(), -1
        while time.monotonic() < give_up:
            row = self.q(
                mon,
                "select coalesce(sum(case when status = 'completed' then 1 else 0 end), 0), "
                "coalesce(sum(case when status in ('failed', 'canceled') then 1 else 0 end), 0) from openworkflow_run",
            )
            polls += 1
            done, failed = int(row[0][0]), int(row[0][1])
            if done + failed >= n:
                break
            if worker.poll() is not None:
                raise PhaseError(f"worker exited with {worker.returncode}:\n{self.tail(worker)}")
            if done + failed != last_count:
                last_progress, last_count = time.monotonic(), done + failed
            elif time.monotonic() - last_progress > self.stall:
                self.note(
                    f"{label}: no run finished for {self.stall:.0f}s; giving up. Worker log tail:\n{self.tail(worker)}"
                )
                break
            time.sleep(0.02)
        c1 = cpu_sample()
        w1 = proc_cpu_s(worker.pid)
        if done + failed < n:
            self.note(f"{label}: timed out after {self.timeout:.0f}s with {done}/{n} completed")
            self.ok = False
        mon.close()
        if profiler is not None:
            self.stop_profiler(profiler)
        self.stop(worker)
        self.dbh.settle((WORKER_APP, PRODUCER_APP, MONITOR_APP))
        m1 = self.dbh.mark()

        mon = self.raw()
        ((maxfin, minstart),) = self.q(
            mon, "select max(finished_at), min(started_at) from openworkflow_run where status = 'completed'"
        )
        ((steps_done,),) = self.q(mon, "select count(*) from openworkflow_step_attempt where status = 'completed'")
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
            res.update(self.dbh.commit_figures(m0, m1, polls, counted, done, steps_done))
        res["ok"] = done == n and failed == 0 and steps_done >= steps * n
        if not res["ok"]:
            self.ok = False
        self.print_throughput(res)
        return res

    def start_profiler(self, pid: int, label: str):  # type: ignore[no-untyped-def]
        out = Path(self.args.profile) / f"{self.short}-{label}.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        pyspy = Path(sys.executable).parent / "py-spy"
        cmd = [
            str(pyspy),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--output",
            str(out),
            "--rate",
            "100",
            "--nonblocking",
            "--threads",
            *os.environ.get("BENCH_PYSPY_ARGS", "").split(),  # e.g. "--gil" for CPU (GIL-holding) samples only
        ]
        with open(out.with_suffix(".log"), "w") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.children.append(proc)
        return proc

    def stop_profiler(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGINT)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
        self.children.remove(proc)

    def print_throughput(self, r: dict) -> None:
        t = r["label"]
        if r["conc_effective"] != r["conc"]:
            self.emit(f"thr.{t}.conc_effective", r["conc_effective"], "slots")
        self.emit(f"thr.{t}.wf_per_s", r["completed"] / r["wall_s"] if r["wall_s"] else NAN, "wf/s")
        self.emit(f"thr.{t}.steps_per_s", r["steps_done"] / r["wall_s"] if r["wall_s"] else NAN, "steps/s")
        self.emit(f"thr.{t}.wall_s", r["wall_s"], "s", 2)
        self.emit(f"thr.{t}.enqueue_s", r["enqueue_s"], "s", 2)
        self.emit(f"thr.{t}.worker_cpu_pct", r["worker_cpu_pct"], "%(1 core=100)", 0)
        self.emit(f"thr.{t}.machine_cpu_ms_per_wf", r["cpu_ms_per_wf"], "ms/wf", 2)
        self.emit(f"thr.{t}.worker_cpu_ms_per_wf", r["worker_cpu_ms_per_wf"], "ms/wf", 2)
        self.emit(f"thr.{t}.loadavg_before", r["load1"], "(1-min load average before the run; 2 cores)", 2)
        for key, figure, unit in self.dbh.commit_lines:
            if key in r:
                self.emit(f"commits.{t}.{figure}", r[key], unit, 2)
        if not r["ok"]:
            self.note(
                f"{t}: NOT OK: completed={r['completed']}/{r['n']} failed={r['failed']} steps_done={r['steps_done']}"
            )

    def result_fields(self, r: dict) -> list[str]:
        done, wall = r["completed"], r["wall_s"]
        parts = [
            f"mode={r['mode']}",
            f"n={r['n']}",
            f"conc={r['conc_effective']}",
            f"steps={r['steps']}",
            f"db={self.db}",
            f"wall_s={fmt(wall, 2)}",
            f"wf_per_s={fmt(done / wall if wall else NAN)}",
            f"steps_per_s={fmt(r['steps_done'] / wall if wall else NAN)}",
            f"enqueue_s={fmt(r['enqueue_s'], 2)}",
            f"completed={done}",
            f"failed={r['failed']}",
            f"steps_done={r['steps_done']}",
            f"cpu_util_pct={fmt(r['cpu_util_pct'], 0)}",
            f"cpu_ms_per_wf={fmt(r['cpu_ms_per_wf'], 2)}",
            f"worker_cpu_pct={fmt(r['worker_cpu_pct'], 0)}",
            f"load1={fmt(r['load1'], 2)}",
        ]
        for k in (
            "write_txn_per_wf",
            "wal_kb_per_wf",
            "commits_per_wf",
            "commits_per_step",
            "handler_commits_per_wf",
            "redo_kb_per_wf",
        ):
            if k in r:
                parts.append(f"{k}={fmt(r[k], 2)}")
        return parts

    # ---- latency

    def latency(self, samples: int, gap_ms: int, conc: int = 20) -> tuple[list[float], list[float], int]:
        from django.db import connections

        from django_openworkflow.models import WorkflowRun
        from django_openworkflow.registry import registry

        self.reset_tables()
        worker = self.start_worker(self.effective_concurrency(conc), "latency")
        spec = registry.latest("bench-1")
        time.sleep(2.0)  # 3 s idle in total, like the peers
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
            self.stop(worker)
        self.emit("lat.samples", len(lat), f"runs (1 step, idle worker, gap U(0,{gap_ms} ms))")
        for q in (50, 95, 99):
            self.emit(f"lat.server_p{q}", pct(lat, q), "ms (start -> finished_at)", 1)
        for q in (50, 95, 99):
            self.emit(f"lat.result_p{q}", pct(nat, q), "ms (start -> handle.result() returned)", 1)
        after = [n - s for n, s in zip(nat, lat, strict=True)]
        self.emit("lat.result_after_finish_p50", pct(after, 50), "ms (handle.result() return - finished_at)", 1)
        return lat, nat, gap_ms

    # ---- replay scaling

    def replay(self, reps_small: int, reps_big: int) -> None:
        from django.db import connections
        from django.utils import timezone

        from django_openworkflow.engine.execute import Outcome, execute_slice
        from django_openworkflow.models import WorkflowRun
        from django_openworkflow.registry import registry
        from django_openworkflow.store import get_backend

        self.reset_tables()
        spec = registry.latest("bench-long")
        wid = f"bench-replay-{uuid.uuid4().hex[:8]}"
        lease = timedelta(minutes=5)

        def timed_slice(run_id) -> float:  # type: ignore[no-untyped-def]
            claimed = get_backend().claim_run(run_id, wid, lease)
            if claimed is None:
                raise PhaseError(f"could not claim run {run_id}")
            t0 = time.perf_counter()
            res = execute_slice(claimed)
            dt = time.perf_counter() - t0
            if res.outcome != Outcome.COMPLETED:
                raise PhaseError(f"replay run ended {res.outcome}: {res.detail}")
            return dt

        def rewind(run_id) -> None:  # type: ignore[no-untyped-def]
            WorkflowRun.objects.filter(id=run_id).update(
                status="pending",
                worker_id=None,
                output=None,
                finished_at=None,
                available_at=timezone.now() - timedelta(seconds=1),
            )

        def measure(steps: int, reps: int) -> tuple[float, float]:
            fresh, again = [], []
            for _ in range(reps):
                handle = spec.run({"steps": steps})
                fresh.append(timed_slice(handle.id) / steps)
                rewind(handle.id)
                again.append(timed_slice(handle.id) / steps)
            return statistics.median(fresh) * 1000.0, statistics.median(again) * 1000.0

        measure(10, 2)  # warm up
        small_exec, small_replay = measure(10, reps_small)
        big_exec, big_replay = measure(1000, reps_big)
        connections.close_all()
        self.emit("replay.exec_per_step_10", small_exec, "ms/step (fresh 10-step run, one slice)", 3)
        self.emit("replay.exec_per_step_1000", big_exec, "ms/step (fresh 1000-step run, one slice)", 3)
        self.emit("replay.exec_ratio", big_exec / small_exec, "x (1000-step / 10-step per-step cost)", 2)
        self.emit("replay.replay_per_step_10", small_replay, "ms/step (re-executing a completed 10-step history)", 4)
        self.emit("replay.replay_per_step_1000", big_replay, "ms/step (re-executing a completed 1000-step history)", 4)
        self.emit("replay.replay_ratio", big_replay / small_replay, "x (1000-step / 10-step per-step cost)", 2)

    # ---- claim scaling

    def _insert_runs_sql(self, count: int, status: str, when: str) -> tuple[str, list]:
        """One INSERT ... SELECT of ``count`` rows; ``when`` is 'past' | 'future' | 'due'.

        Columns this script does not know (added to the model later) get their
        Django default, so the filler keeps working while the model evolves.
        """
        from django.db import connection

        from django_openworkflow.models import WorkflowRun

        exprs_for = self.dbh.filler_exprs()
        times = {when_: exprs_for[when_] for when_ in ("past", "future", "due")}
        now, uid = exprs_for["now"], exprs_for["uid"]
        finished = status in ("completed", "failed", "canceled")
        known = {
            "id": uid,
            "workflow_name": "'bench-3'",
            "status": f"'{status}'",
            "input": "'0'",
            "output": "'3'" if finished else "NULL",
            "available_at": times[when],
            "created_at": times[when] if when != "due" else now,
            "updated_at": now,
            "started_at": times[when] if status != "pending" else "NULL",
            "finished_at": times[when] if finished else "NULL",
            "worker_id": "NULL",
            "attempts": "0",
        }
        cols, exprs, params = [], [], []
        for field in WorkflowRun._meta.concrete_fields:
            cols.append(connection.ops.quote_name(field.column))
            if field.column in known:
                exprs.append(known[field.column])
            elif field.null:
                exprs.append("NULL")
            else:
                exprs.append("%s")
                params.append(field.get_db_prep_save(field.get_default(), connection))
        insert = f"INSERT INTO openworkflow_run ({', '.join(cols)}) SELECT {', '.join(exprs)}"
        return self.dbh.insert_series(insert, params, count)

    def claims(self, finished: int, parked: int, reps: int, batch: int = 20) -> None:
        from django.db import connection, connections

        from django_openworkflow.store import get_backend

        lease = timedelta(seconds=30)
        wid = f"bench-claims-{uuid.uuid4().hex[:8]}"

        def analyze() -> None:
            with connection.cursor() as cur:
                cur.execute(self.dbh.analyze_sql)
                if cur.description:  # MariaDB's ANALYZE TABLE answers with a status table
                    cur.fetchall()

        def insert(count: int, status: str, when: str) -> None:
            sql, params = self._insert_runs_sql(count, status, when)
            with connection.cursor() as cur:
                cur.execute(sql, params)

        def measure() -> dict:
            idle, busy = [], []
            for _ in range(reps):
                t0 = time.perf_counter()
                got = get_backend().claim(wid, batch, lease)
                idle.append((time.perf_counter() - t0) * 1000.0)
                if got:
                    raise PhaseError(f"idle claim returned {len(got)} runs")
            for _ in range(reps):
                insert(batch, "pending", "due")
                t0 = time.perf_counter()
                got = get_backend().claim(wid, batch, lease)
                busy.append((time.perf_counter() - t0) * 1000.0)
                if len(got) != batch:
                    raise PhaseError(f"claim returned {len(got)} of {batch} due runs")
                ids = [c.run.id for c in got]
                from django_openworkflow.models import WorkflowRun

                WorkflowRun.objects.filter(id__in=ids).delete()
            return {
                "idle": statistics.median(idle),
                "idle_p95": pct(idle, 95),
                "busy": statistics.median(busy),
                "busy_p95": pct(busy, 95),
            }

        self.reset_tables()
        analyze()
        measure()  # warm up
        empty = measure()
        t0 = time.perf_counter()
        insert(finished, "completed", "past")
        insert(parked, "running", "future")
        analyze()
        fill_s = time.perf_counter() - t0
        full = measure()
        self.reset_tables()
        connections.close_all()
        self.emit("claims.fill_s", fill_s, f"s (insert {finished} finished + {parked} parked runs, ANALYZE)", 1)
        self.emit("claims.empty_idle_ms", empty["idle"], "ms (claim finding nothing, empty table, median)", 3)
        self.emit(
            "claims.full_idle_ms", full["idle"], f"ms (claim finding nothing, {finished}+{parked} rows, median)", 3
        )
        self.emit("claims.idle_ratio", full["idle"] / empty["idle"], "x", 2)
        self.emit(
            f"claims.empty_claim{batch}_ms", empty["busy"], f"ms (claim {batch} due runs, empty table, median)", 3
        )
        self.emit(
            f"claims.full_claim{batch}_ms",
            full["busy"],
            f"ms (claim {batch} due runs, {finished}+{parked} rows, median)",
            3,
        )
        self.emit(f"claims.full_claim{batch}_p95_ms", full["busy_p95"], "ms", 3)
        self.emit("claims.ratio", full["busy"] / empty["busy"], "x (full / empty, claim of due runs)", 2)

    # ---- memory

    def memory(self, first: int, total: int, conc: int = 20) -> None:
        self.reset_tables()
        worker = self.start_worker(self.effective_concurrency(conc), "memory")
        rss_idle = rss_mb(worker.pid)
        producer = self.start_producer("bench-3", total, batch=100)
        self.go(producer)
        mon = self.raw()
        rss_first = NAN
        done = 0
        give_up = time.monotonic() + self.timeout
        while time.monotonic() < give_up:
            ((done,),) = self.q(mon, "select count(*) from openworkflow_run where status = 'completed'")
            if math.isnan(rss_first) and done >= first:
                rss_first = rss_mb(worker.pid)
                at_first = done
            if done >= total:
                break
            if worker.poll() is not None:
                raise PhaseError(f"worker exited with {worker.returncode}:\n{self.tail(worker)}")
            time.sleep(0.05 if math.isnan(rss_first) else 0.5)
        rss_end = rss_mb(worker.pid)
        mon.close()
        self.producer_result(producer, 60)
        self.stop(worker)
        if done < total:
            self.note(f"memory: timed out with {done}/{total} completed")
            self.ok = False
        self.emit("mem.rss_idle_mb", rss_idle, "MB (worker idle, before any run)", 1)
        self.emit(
            f"mem.rss_after_{first}_mb",
            rss_first,
            f"MB (sampled at {at_first if not math.isnan(rss_first) else 0} completed)",
            1,
        )
        self.emit(f"mem.rss_after_{total}_mb", rss_end, f"MB ({done} completed)", 1)
        self.emit("mem.growth_mb", rss_end - rss_first, f"MB (from {first} to {total} completed runs)", 1)

    # ---- driver

    def run(self) -> list[str]:
        args = self.args
        only = [p.strip() for p in args.only.split(",") if p.strip()]
        for p in only:
            if p not in PHASES:
                raise SystemExit(f"unknown phase {p!r}; choose from {', '.join(PHASES)}")
        quick = self.quick
        self.setup()
        lines: list[str] = []
        tag = (" " + args.tag.strip()) if args.tag.strip() else ""
        pre = self.dbh.cfg_prefix

        def phase(name: str, fn) -> None:  # type: ignore[no-untyped-def]
            if name not in only:
                return
            t0 = time.monotonic()
            try:
                fn()
            except Exception as exc:
                self.ok = False
                self.note(f"phase {name} FAILED: {exc!r}")
                traceback.print_exc()
                self.kill_children()
            self.emit(f"phase.{name}_s", time.monotonic() - t0, "s (time this phase took)", 1)

        thr_rows: list[tuple[str, dict]] = []

        def run_throughput() -> None:
            if args.peer_protocol:
                n = args.n or (200 if quick else 2000)
                configs = [
                    (f"live_c20_3x{n}", "bench-3", 3, n, 20, "live", f"{pre}_c20"),
                    (f"live_c100_3x{n}", "bench-3", 3, n, 100, "live", f"{pre}_c100"),
                    (f"prefill_c20_3x{n}", "bench-3", 3, n, 20, "prefill", f"{pre}_c20_prefill"),
                ]
            else:
                n4 = args.n or (200 if quick else 1000)
                n3 = args.n or (200 if quick else 2000)
                configs = [
                    (f"live_c100_4x{n4}", "bench-4", 4, n4, 100, "live", f"{pre}_c100_4step"),
                    (f"live_c20_3x{n3}", "bench-3", 3, n3, 20, "live", f"{pre}_c20"),
                    (f"prefill_c20_3x{n3}", "bench-3", 3, n3, 20, "prefill", f"{pre}_c20_prefill"),
                ]
            for label, wf, steps, n, conc, mode, cfg in configs:
                try:
                    r = self.throughput(label, wf, steps, n, conc, mode)
                except Exception as exc:
                    self.ok = False
                    self.note(f"{label} FAILED: {exc!r}")
                    if not isinstance(exc, PhaseError):
                        traceback.print_exc()
                    self.kill_children()
                    continue
                thr_rows.append((cfg, r))

        lat_result: list = []

        def run_latency() -> None:
            samples = args.lat_n or (30 if quick else (50 if args.peer_protocol else 200))
            gap = args.gap_ms if args.gap_ms is not None else (200 if quick else 1000)
            lat_result.append(self.latency(samples, gap))

        phase("throughput", run_throughput)
        phase("latency", run_latency)
        phase("replay", lambda: self.replay(5 if quick else 20, 1 if quick else 3))
        phase(
            "claims",
            lambda: self.claims(100_000 if quick else 1_000_000, 1_000 if quick else 10_000, 50 if quick else 200),
        )
        phase("memory", lambda: self.memory(500 if quick else 1000, 5_000 if quick else 50_000))

        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for cfg, r in thr_rows:
            lines.append(
                " ".join(
                    [
                        "RESULT",
                        "peer=ours",
                        *self.result_fields(r),
                        "lat_n=0",
                        f"ok={str(r['ok']).lower()}",
                        f"ts={ts}",
                        f"cfg={cfg}",
                    ]
                )
                + tag
            )
        if lat_result:
            la, na, gap = lat_result[0]
            if la:
                lines.append(
                    " ".join(
                        [
                            "RESULT",
                            "peer=ours",
                            "mode=live",
                            "n=0",
                            "conc=20",
                            f"db={self.db}",
                            "wall_s=nan",
                            "wf_per_s=nan",
                            "steps_per_s=nan",
                            f"lat_n={len(la)}",
                            f"lat_gap_ms={gap}",
                            f"lat_p50_ms={fmt(pct(la, 50))}",
                            f"lat_p90_ms={fmt(pct(la, 90))}",
                            f"lat_p95_ms={fmt(pct(la, 95))}",
                            f"lat_p99_ms={fmt(pct(la, 99))}",
                            f"lat_min_ms={fmt(min(la))}",
                            f"native_p50_ms={fmt(pct(na, 50))}",
                            f"native_p90_ms={fmt(pct(na, 90))}",
                            f"native_p95_ms={fmt(pct(na, 95))}",
                            f"native_p99_ms={fmt(pct(na, 99))}",
                            "ok=true",
                            f"ts={ts}",
                            f"cfg={pre}_lat",
                        ]
                    )
                    + tag
                )
        return lines

    def close(self) -> None:
        self.kill_children()
        self.dbh.close(keep=self.args.keep_db)


def main() -> int:
    args = parse_args()
    if args.role == "_produce":
        os.environ["BENCH_DB"] = args.db
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        produce(args)
        return 0
    if args.db == "all":
        # Django settings are per process: run each database in its own process.
        rest, skip = [], False
        for a in sys.argv[1:]:
            if skip:
                skip = False
            elif a == "--db":
                skip = True
            elif not a.startswith("--db="):
                rest.append(a)
        rc = 0
        for db in BENCH_DBS:
            rc |= subprocess.call([sys.executable, str(Path(__file__).resolve()), *rest, "--db", db])
        return rc
    os.environ["BENCH_DB"] = args.db
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ.setdefault("BENCH_APP_NAME", "owf-bench")
    bench = Bench(args, args.db)
    t0 = time.monotonic()
    print(
        f"# django-openworkflow bench: db={args.db} quick={args.quick} host={os.uname().nodename} "
        f"nproc={os.cpu_count()} python={sys.version.split()[0]} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        flush=True,
    )
    old = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        lines = bench.run()
    except KeyboardInterrupt:
        bench.note("interrupted")
        return 130
    finally:
        bench.close()
        signal.signal(signal.SIGTERM, old)
    bench.emit("total_s", time.monotonic() - t0, "s", 1)
    for line in lines:
        print(line, flush=True)
    if not bench.ok:
        bench.note("some phase failed or some runs did not complete (see above)")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
