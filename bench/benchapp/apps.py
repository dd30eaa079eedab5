"""The benchmark app. Its ``workflows.py`` is autodiscovered by django_openworkflow.

Two opt-in hooks, driven by environment variables that ``bench/run.py`` sets on
the processes it starts:

* ``BENCH_READY_FILE``: touched when the process opens its first database
  connection (for a worker: its first claim, i.e. it is in its loop).
* ``BENCH_COUNT_FILE``: count transactions on every connection of the process
  (explicit ``BEGIN`` + write statements run in autocommit) and write the
  totals as JSON there at exit. Used for SQLite, which has no
  ``pg_stat_database``; cheap, but not free.
* ``BENCH_SOAK_DIR``: the soak phase's ledger, heartbeat counting and thread
  names (bench/benchapp/soak.py).
"""

from __future__ import annotations

import atexit
import json
import os
import threading

from django.apps import AppConfig
from django.db.backends.signals import connection_created

_WRITE_VERBS = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class Counter:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.counts = {"begin": 0, "autocommit_writes": 0, "statements": 0}

    def __call__(self, execute, sql, params, many, context):  # Django execute_wrapper signature
        head = sql.lstrip()[:8].upper()
        key = None
        if head.startswith("BEGIN"):
            key = "begin"
        elif head.startswith(_WRITE_VERBS):
            conn = context["connection"]
            if conn.get_autocommit() and not conn.in_atomic_block:
                key = "autocommit_writes"
        with self.lock:
            self.counts["statements"] += 1
            if key:
                self.counts[key] += 1
        return execute(sql, params, many, context)

    def dump(self) -> None:
        data = dict(self.counts, commits=self.counts["begin"] + self.counts["autocommit_writes"], pid=os.getpid())
        with open(self.path, "w") as fh:
            json.dump(data, fh)


_counter: Counter | None = None
_ready_file = os.environ.get("BENCH_READY_FILE")


def _on_connection(sender, connection, **kwargs):  # type: ignore[no-untyped-def]
    global _ready_file
    if _counter is not None and _counter not in connection.execute_wrappers:
        connection.execute_wrappers.append(_counter)
    if _ready_file:
        path, _ready_file = _ready_file, None
        with open(path, "w") as fh:
            fh.write(str(os.getpid()))


class BenchAppConfig(AppConfig):
    name = "bench.benchapp"
    label = "benchapp"

    def ready(self) -> None:
        global _counter
        path = os.environ.get("BENCH_COUNT_FILE")
        if path:
            _counter = Counter(path)
            atexit.register(_counter.dump)
        if path or _ready_file:
            connection_created.connect(_on_connection, dispatch_uid="bench-hooks")
        if os.environ.get("BENCH_SOAK_DIR"):
            from bench.benchapp import soak

            soak.install()
