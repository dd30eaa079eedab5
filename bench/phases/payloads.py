"""What the payloads' stored form costs (``payloads.<config>.*``): encryption, compression and offloading, off and on.

For each configuration (``off``; ``encrypted``; ``compressed``; ``offloaded``;
``all``: compressed, encrypted and offloaded), on emptied tables: one
``runworkflows`` subprocess started with that configuration (through
``bench/settings.py``'s environment) and left idle, then this process starts
N runs of ``bench-payload`` (``--quick`` fewer) one ``spec.run()`` at a time,
each with an input of about ``SIZE`` bytes of JSON; the workflow's three
steps return values of that size too, so each run stores five payloads.

Printed per configuration: ``start_us`` (the median time of one ``run()``,
what a view pays), ``runs_per_s`` (first start to last finish), and
``db_kib`` / ``files_kib`` (the workflow tables' size, indexes and TOAST
included, and the payload files' bytes), per run. Compression starts at
1 KiB, offloading at 1 KiB of stored form: the payloads here (8.5 KB of JSON, 1.2 KB compressed)
are above both, so "all" offloads the compressed and encrypted form.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.processes import PhaseError, loadavg

if TYPE_CHECKING:
    from bench.context import Bench

SIZE = 8_000
COMPRESSION = 1_024
OFFLOAD = 1_024
CONFIGS = ("off", "encrypted", "compressed", "offloaded", "all")


def run(bench: Bench) -> dict:
    n = bench.size(500, 100, 20)
    return {config: measure(bench, config, n) for config in CONFIGS}


def environment(config: str, key: str, files: Path) -> dict[str, str]:
    """The bench settings' environment for one configuration (the worker's; this process overrides its own)."""
    env: dict[str, str] = {}
    if config in ("encrypted", "all"):
        env["OWF_BENCH_KEYS"] = key
    if config in ("compressed", "all"):
        env["OWF_BENCH_COMPRESSION"] = str(COMPRESSION)
    if config in ("offloaded", "all"):
        env["OWF_BENCH_OFFLOAD_DIR"] = str(files)
        env["OWF_BENCH_OFFLOAD"] = str(OFFLOAD)
    return env


def overridden(env: dict[str, str]):  # type: ignore[no-untyped-def]
    """The same settings in this process."""
    from django.conf import settings
    from django.test.utils import override_settings

    more: dict = {}
    if "OWF_BENCH_KEYS" in env:
        more["PAYLOAD_ENCRYPTION"] = [env["OWF_BENCH_KEYS"]]
    if "OWF_BENCH_COMPRESSION" in env:
        more["PAYLOAD_COMPRESSION"] = int(env["OWF_BENCH_COMPRESSION"])
    storages = settings.STORAGES
    if "OWF_BENCH_OFFLOAD_DIR" in env:
        more["PAYLOAD_OFFLOAD"] = {"STORAGE": "payloads", "THRESHOLD": int(env["OWF_BENCH_OFFLOAD"])}
        storages = {**storages, "payloads": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                             "OPTIONS": {"location": env["OWF_BENCH_OFFLOAD_DIR"]}}}  # fmt: skip
    return override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, **more}, STORAGES=storages)


def payload(i: int) -> dict:
    """About SIZE bytes of JSON, as a list of records (ids, names, amounts: what real inputs carry)."""
    rows = [{"id": i * 1000 + k, "name": f"customer {k} of order {i}", "amount": k * 3.5, "tags": ["a", "b"]}
            for k in range(SIZE // 80)]  # fmt: skip
    return {"order": i, "rows": rows}


def table_bytes() -> int:
    """The workflow tables' size on disk, indexes (and PostgreSQL's TOAST) included."""
    from django.apps import apps
    from django.db import connection

    tables = [model._meta.db_table for model in apps.get_app_config("django_openworkflow").get_models()]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT sum(pg_total_relation_size(t)) FROM unnest(%s::text[]) AS t", [tables])
        elif connection.vendor == "mysql":
            for table in tables:
                cursor.execute(f"ANALYZE TABLE {connection.ops.quote_name(table)}")
                cursor.fetchall()
            marks = ", ".join(["%s"] * len(tables))
            cursor.execute(
                "SELECT SUM(data_length + index_length) FROM information_schema.tables "
                f"WHERE table_schema = DATABASE() AND table_name IN ({marks})",
                tables,
            )
        else:
            marks = ", ".join(["%s"] * len(tables))
            try:
                cursor.execute(f"SELECT SUM(pgsize) FROM dbstat WHERE name IN ({marks})", tables)
            except Exception:  # SQLite built without dbstat: the whole file
                cursor.execute("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
        return int(cursor.fetchone()[0] or 0)


def directory_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


def measure(bench: Bench, config: str, n: int) -> dict:
    from cryptography.fernet import Fernet
    from django.db import connections
    from django.db.models import Max, Min

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

    files = bench.tmp / f"payload-files-{config}"
    shutil.rmtree(files, ignore_errors=True)
    files.mkdir()
    env = environment(config, Fernet.generate_key().decode(), files)
    bench.reset_tables()
    load_before = loadavg()
    proc, ready = bench.procs.spawn_worker(20, f"payloads-{config}", env=env)
    try:
        give_up = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > give_up:
                raise PhaseError(f"payloads.{config}: worker not ready:\n{bench.procs.tail(proc)}")
            time.sleep(0.02)
        time.sleep(1.0)  # idle first, as the throughput phase's worker
        spec = registry.latest("bench-payload")
        inputs = [payload(i) for i in range(n)]
        starts = []
        with overridden(env):
            for value in inputs:
                t0 = time.perf_counter()
                spec.run(value)
                starts.append(time.perf_counter() - t0)
            give_up = time.monotonic() + bench.timeout
            done = WorkflowRun.objects.filter(status="completed")
            while done.count() < n:
                if proc.poll() is not None or time.monotonic() > give_up:
                    raise PhaseError(f"payloads.{config}: {done.count()} of {n} runs completed")
                time.sleep(0.1)
            span = WorkflowRun.objects.aggregate(first=Min("created_at"), last=Max("finished_at"))
            sample = WorkflowRun.objects.order_by("created_at").first()
            if sample is None or sample.output != {"order": sample.input["order"], "steps": 3}:
                raise PhaseError(f"payloads.{config}: a run's output is wrong")
            db = table_bytes()
    finally:
        bench.procs.stop(proc)
        connections.close_all()
    seconds = (span["last"] - span["first"]).total_seconds()
    on_disk = directory_bytes(files)
    figures = {
        "start_us": statistics.median(starts) * 1e6,
        "runs_per_s": n / seconds,
        "db_kib_per_run": db / n / 1024,
        "files_kib_per_run": on_disk / n / 1024,
    }
    bench.emit(f"payloads.{config}.start_us", figures["start_us"], f"µs per run() (median of {n})", 0)
    bench.emit(f"payloads.{config}.runs_per_s", figures["runs_per_s"], "runs/s (3 steps, 5 payloads a run)")
    bench.emit(f"payloads.{config}.db_kib_per_run", figures["db_kib_per_run"], "KiB of tables per run")
    bench.emit(f"payloads.{config}.files_kib_per_run", figures["files_kib_per_run"], "KiB of payload files per run")
    bench.note(f"payloads.{config}: load {load_before:.1f} before, {loadavg():.1f} after")
    shutil.rmtree(files, ignore_errors=True)
    bench.reset_tables()
    return figures
