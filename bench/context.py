"""One database's run of the suite: what every phase shares.

A :class:`Bench` holds the options, the database (a :class:`bench.databases.BenchDB`),
the subprocesses (:class:`bench.processes.Processes`), the output prefix and the
overall ok flag. Each phase (bench/phases/) is a function of a ``Bench``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench import report
from bench.databases import BENCH_DBS, BenchDB
from bench.processes import Processes


class Bench:
    def __init__(self, args: argparse.Namespace, db: str) -> None:
        self.args = args
        self.db = db
        self.dbh: BenchDB = BENCH_DBS[db](self.note)
        self.short = self.dbh.short
        self.smoke = bool(getattr(args, "smoke", False))
        self.quick = args.quick or self.smoke
        self.tmp = Path(tempfile.mkdtemp(prefix=f"owf-bench-{self.short}-"))
        self.procs = Processes(db, self.tmp, args.poll, self.note)
        self.ok = True
        self.timeout = args.timeout or (240.0 if self.quick else 900.0)
        self.stall = 30.0 if self.quick else 60.0  # no run finished for this long: give the phase up

    def size(self, full: int, quick: int, smoke: int) -> int:
        """A phase's size: ``full``, ``quick`` with --quick, ``smoke`` with --smoke (CI: paths taken, figures moot)."""
        return smoke if self.smoke else quick if self.quick else full

    # ---- output

    def emit(self, name: str, value, unit: str, d: int = 1) -> None:  # type: ignore[no-untyped-def]
        report.emit(self.short, name, value, unit, d)

    def note(self, text: str) -> None:
        report.note(self.short, text)

    # ---- the database

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

    def close(self) -> None:
        self.procs.kill_children()
        self.dbh.close(keep=self.args.keep_db)
