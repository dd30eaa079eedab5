"""The bench databases: one class per database, for everything that differs between them.

Creating and emptying the database, the monitor's own connections, server counters
(commits, transaction ids, WAL / redo log), connection headroom, the claim-scaling
filler's SQL and ``ANALYZE``. The phases ask a :class:`BenchDB`, never ``--db``.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import suppress
from datetime import UTC, datetime

from bench.report import NAN

# application names of the suite's sessions (PostgreSQL tells them apart in pg_stat_activity)
WORKER_APP = "owf-bench-worker"
PRODUCER_APP = "owf-bench-producer"
MONITOR_APP = "owf-bench-monitor"


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

    garbage_label = "garbage"
    """What :meth:`garbage` measures, as a column heading of the soak phase."""

    def garbage(self, conn) -> float:  # type: ignore[no-untyped-def]
        """What old row versions the run table leaves behind now (``conn``: a :meth:`raw` connection)."""
        return NAN

    def garbage_caveat(self) -> str | None:
        """A server setting that decides how :meth:`garbage` evolves, worth saying before a soak."""
        return None

    def stand_in_for_autovacuum(self) -> bool:
        """When the server does not reclaim old row versions by itself: do it once now; False when it does."""
        return False

    def settle(self, apps: tuple[str, ...]) -> None:
        """Wait until the sessions of these application names have flushed their statistics."""

    def wait_sampler(self) -> WaitSampler | None:
        """A started thread sampling the sessions' wait events until stopped (None: not measured here)."""
        return None

    def run_table_counters(self) -> dict | None:
        """The run table's cumulative update counters and dead tuples (None: not measured on this database)."""
        return None

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


class WaitSampler(threading.Thread):
    """Samples pg_stat_activity every 10 ms: active sessions of the bench database, and those on Lock:object.

    Lock:object is where a committing NOTIFY waits: PostgreSQL serialises the commits of
    notifying transactions on one server-wide lock held through the WAL flush. ``active``
    and ``lock_object`` are written by this thread only and read after :meth:`finish`.
    """

    def __init__(self, connect, dbname: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__(name="bench-waits", daemon=True)
        self.connect, self.dbname = connect, dbname
        self.active = self.lock_object = self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        with self.connect() as conn:
            while not self._halt.is_set():
                row = conn.execute(
                    "select count(*), count(*) filter (where wait_event_type = 'Lock' and wait_event = 'object') "
                    "from pg_stat_activity where datname = %s and state = 'active' and pid <> pg_backend_pid()",
                    (self.dbname,),
                ).fetchone()
                self.active += int(row[0])
                self.lock_object += int(row[1])
                self.samples += 1
                self._halt.wait(0.01)

    def finish(self) -> float:
        """Stop; the share of active sessions that waited on Lock:object, in % (NaN: none active)."""
        self._halt.set()
        self.join(5)
        return 100.0 * self.lock_object / self.active if self.active else NAN


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

    garbage_label = "dead_tup"

    def garbage_caveat(self) -> str | None:
        (setting,) = self.stats_conn.execute("show autovacuum").fetchone()
        if setting != "on":
            return f"autovacuum is {setting} on this server: the run table's dead tuples are never reclaimed here"
        return None

    def stand_in_for_autovacuum(self) -> bool:
        (setting,) = self.stats_conn.execute("show autovacuum").fetchone()
        if setting == "on":
            return False
        with self._connect(self.settings_db["NAME"], MONITOR_APP + "-vacuum") as conn:
            conn.execute("vacuum (analyze) openworkflow_run, openworkflow_step_attempt")
        return True

    def garbage(self, conn) -> float:  # type: ignore[no-untyped-def]
        """Dead tuples of the run table (pg_stat_user_tables.n_dead_tup: autovacuum's backlog)."""
        row = conn.execute("select n_dead_tup from pg_stat_user_tables where relname = 'openworkflow_run'").fetchone()
        return float(row[0]) if row else NAN

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

    def wait_sampler(self) -> WaitSampler | None:
        sampler = WaitSampler(lambda: self._connect("postgres", MONITOR_APP + "-waits"), self.settings_db["NAME"])
        sampler.start()
        return sampler

    def run_table_counters(self) -> dict | None:
        with self.raw() as conn:
            row = conn.execute(
                "select n_tup_upd, n_tup_hot_upd, n_dead_tup, n_live_tup from pg_stat_user_tables "
                "where relname = 'openworkflow_run'"
            ).fetchone()
        return (
            None if row is None else dict(zip(("upd", "hot_upd", "dead_tup", "live_tup"), map(int, row), strict=True))
        )

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

    garbage_label = "wal_mb"

    def garbage(self, conn) -> float:  # type: ignore[no-untyped-def]
        """SQLite keeps no dead rows but a write-ahead log: its size in MB (a checkpoint starved by readers grows it)."""
        try:
            return os.path.getsize(str(self.settings_db["NAME"]) + "-wal") / 1e6
        except OSError:
            return NAN

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

    garbage_label = "hist_len"

    def garbage(self, conn) -> float:  # type: ignore[no-untyped-def]
        """InnoDB's history list length: undo records purge has not removed yet (server-wide)."""
        with conn.cursor() as cur:
            cur.execute("SELECT `count` FROM information_schema.innodb_metrics WHERE name = 'trx_rseg_history_len'")
            row = cur.fetchone()
        return float(row[0]) if row else NAN

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
