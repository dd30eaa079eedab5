"""django-openworkflow as an adapter of hardbyte/postgresql-job-queue-benchmarking (its ``long_horizon`` scenario).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/openworkflow_bench \\
        SCENARIO=long_horizon PRODUCER_MODE=fixed PRODUCER_RATE=100 WORKER_COUNT=8 SAMPLE_EVERY_S=2 \\
        python -m bench.harness.adapter

The harness's adapter contract (its CONTRIBUTING_ADAPTERS.md): one
long-running process, the settings in environment variables, telemetry as
JSON lines on stdout (a descriptor, then the required metrics every
``SAMPLE_EVERY_S``, clock-aligned), logs on stderr, exit 0 within 5 s of
SIGTERM.

What a project would run: the package's own install path (``migrate``), the
public API to start jobs (``run_many``, in batches of up to
``PRODUCER_BATCH_MAX``), and ``manage.py runworkflows`` processes for the
consumers, ``WORKER_COUNT`` slots in all (``OWF_WORKER_PROCESSES``
processes; by default one per 8 slots, at most one per core), each claiming
as many runs ahead as it has slots (``--prefetch``; ``OWF_WORKER_PREFETCH``
to choose), as the harness's other adapters fetch jobs in batches. Each job is a
workflow run of one step (workflows.py), whose worker reports the job's
pickup latency on its stdout.

The harness's per-phase knobs (its ``PHASES.md`` §4): ``WORKER_FAIL_MODE``,
``JOB_FAIL_FIRST_MOD`` and ``JOB_MAX_ATTEMPTS`` are the step's
(workflows.py); ``PRIORITY_AGING_MS`` is ``OPENWORKFLOW["PRIORITY_AGING"]``
(settings.py); ``JOB_PRIORITY_PATTERN`` gives job ``i`` the pattern's
``i``-th priority (cyclically), started with our priority for it;
``BENCH_QUEUE_COUNT=N`` starts job ``i`` in queue ``harness-<i % N>``, and
every ``runworkflows`` process serves the N queues (``--queue`` each) with
its slots. ``BENCH_DLQ_ENABLED`` asks nothing of ours: a run whose step
failed for good stays in the run table as ``failed``, our dead letter.
Besides the contract's metrics it emits ``retryable_failure_rate`` (every
failed attempt, retryable or terminal, as awa's adapter counts) and, with a
priority pattern, ``completed_priority_{1,4}_rate`` (by the priority claimed
at), ``completed_original_priority_{1,4}_rate`` (by the priority inserted
with) and ``aged_completion_rate`` (the two differ).

Threads: the main thread samples and emits (and its signal handlers mark a list); "producer" inserts; "depth"
counts the queue; "stdin" drops the harness's pacing lines; one "reader" per worker process reads its reports. What
more than one touches is guarded by ``Stats.lock`` or is an Event.
"""

from __future__ import annotations

import collections
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "openworkflow"
EVENT_TABLES = json.loads((Path(__file__).with_name("adapter.json")).read_text())["event_tables"]
WINDOW_S = 30.0  # the claim percentiles' rolling window, as the contract says


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


# BENCH_QUEUE_COUNT=N > 1: the queues job i goes to in turn; otherwise none named (the default queue).
QUEUE_COUNT = env_int("BENCH_QUEUE_COUNT", 1)
QUEUES = [f"harness-{i}" for i in range(QUEUE_COUNT)] if QUEUE_COUNT > 1 else []
PRIORITY_METRICS = ("priority_1", "priority_4", "original_priority_1", "original_priority_4", "aged")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def emit(record: dict[str, Any]) -> None:
    record.setdefault("instance_id", env_int("BENCH_INSTANCE_ID", 0))
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Stats:
    """Counters and the recent pickup latencies: a bounded ring (the last 65,536 jobs), read per window."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.enqueued = 0  # guarded by lock
        self.completed = 0  # guarded by lock
        self.pickups: collections.deque[tuple[float, float]] = collections.deque(maxlen=65536)  # guarded by lock
        self.depth = 0  # written under lock (the "depth" thread's count, the producer's inserts since); read whole
        self.target_rate = 0.0  # written by the producer alone; read whole
        self.failed = 0  # guarded by lock
        # "priority_1", "original_priority_4", "aged": completions by the harness's priorities; guarded by lock
        self.by_priority: collections.Counter[str] = collections.Counter()

    def percentiles(self, now: float) -> tuple[float, float, float]:
        with self.lock:
            values = sorted(ms for at, ms in self.pickups if at >= now - WINDOW_S)
        if not values:
            return 0.0, 0.0, 0.0

        def rank(q: float) -> float:
            return values[min(len(values) - 1, max(0, math.ceil(q * len(values)) - 1))]

        return rank(0.50), rank(0.95), rank(0.99)


def start_workers(slots: int, stats: Stats) -> list[subprocess.Popen[bytes]]:
    processes = env_int("OWF_WORKER_PROCESSES", max(1, min(os.cpu_count() or 1, math.ceil(slots / 8))))
    shares = [slots // processes + (1 if i < slots % processes else 0) for i in range(processes)]
    workers = []
    for i, share in enumerate(share for share in shares if share):
        command = [sys.executable, "-m", "django", "runworkflows", "--settings=bench.harness.settings"]
        command += ["--concurrency", str(share), "--verbosity", "0"]
        # Runs claimed ahead of free slots (runworkflows --prefetch), as the other adapters fetch in batches:
        # by default as many as the process's slots.
        command += ["--prefetch", os.environ.get("OWF_WORKER_PREFETCH", str(share))]
        for queue in QUEUES:
            command += ["--queue", queue]
        env = dict(os.environ, PYTHONPATH=str(ROOT), OWF_HARNESS_APP_NAME=f"owf-harness-worker-{i}")
        # A session of its own: the signal to stop comes from this process only, once (a second one
        # sent to the whole group, as timeout(1) sends it, would make the worker exit without draining).
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, start_new_session=True)
        threading.Thread(target=read_reports, args=(proc, stats), name=f"reader-{i}", daemon=True).start()
        workers.append(proc)
    print(f"[openworkflow] {len(workers)} runworkflows process(es), slots {shares}", file=sys.stderr)
    return workers


def read_reports(proc: subprocess.Popen[bytes], stats: Stats) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(b"done "):
            # "done <pickup ms>", and with a priority pattern "<inserted with> <claimed at>" (workflows.py)
            pickup_ms, *priorities = line[5:].split()
            with stats.lock:
                stats.completed += 1
                stats.pickups.append((time.monotonic(), float(pickup_ms)))
                if priorities:
                    original, claimed = (p.decode() for p in priorities)
                    stats.by_priority.update(
                        [f"priority_{claimed}", f"original_priority_{original}"] + (["aged"] * (original != claimed))
                    )
        elif line == b"fail\n":
            with stats.lock:
                stats.failed += 1
    print(f"[openworkflow] a runworkflows process exited with {proc.wait()}", file=sys.stderr)


def produce(stats: Stats, stopping: threading.Event) -> None:
    """Insert jobs at PRODUCER_RATE, credited on wall-clock time (or hold TARGET_DEPTH), in run_many batches."""
    from django.db import connection

    mode = os.environ.get("PRODUCER_MODE", "fixed")
    base_rate = float(env_int("PRODUCER_RATE", 800))
    control = os.environ.get("PRODUCER_RATE_CONTROL_FILE", "")
    target_depth = env_int("TARGET_DEPTH", 1000)
    batch_max = max(1, env_int("PRODUCER_BATCH_MAX", 128))
    period_s = max(1, env_int("PRODUCER_BATCH_MS", 10)) / 1000.0
    padding = "x" * max(0, env_int("JOB_PAYLOAD_BYTES", 256) - 32)
    pattern = [int(p) for p in os.environ.get("JOB_PRIORITY_PATTERN", "").split(",") if p.strip()]
    credit, last, seq = 0.0, time.monotonic(), 0
    try:
        while not stopping.is_set():
            if mode == "depth-target":
                count = min(batch_max, target_depth - stats.depth)
                if count <= 0:
                    stopping.wait(0.05)
                    continue
            else:
                stopping.wait(max(0.0, period_s - (time.monotonic() - last)))
                rate = stats.target_rate = controlled_rate(control, base_rate)
                now = time.monotonic()
                credit += rate * (now - last)  # real elapsed time, not the nominal period
                last = now
                count = min(batch_max, int(credit))
                if count < 1:
                    continue
                credit -= count
            try:
                start_batch(seq, count, pattern, padding)
            except Exception as exc:  # the next batch tries again; the failure is logged, not fatal
                print(f"[openworkflow] producer insert failed: {exc!r}", file=sys.stderr)
                connection.close()
                continue
            seq += count
            with stats.lock:
                stats.enqueued += count
                if mode == "depth-target":
                    stats.depth += count  # until the next count: the producer must not overshoot meanwhile
    finally:
        connection.close()


def start_batch(seq: int, count: int, pattern: list[int], padding: str) -> None:
    """Jobs ``seq`` to ``seq + count - 1``: one ``run_many`` per (queue, priority) among them, in one transaction."""
    from django.db import transaction

    from bench.harness.workflows import harness_job, our_priority

    groups: dict[tuple[str | None, int | None], list[dict[str, Any]]] = collections.defaultdict(list)
    now = time.time()
    for i in range(seq, seq + count):
        job: dict[str, Any] = {"t": now, "s": i, "p": padding}
        priority = None
        if pattern:
            job["q"] = pattern[i % len(pattern)]
            priority = our_priority(job["q"])
        groups[QUEUES[i % len(QUEUES)] if QUEUES else None, priority].append(job)
    with transaction.atomic():
        for (queue, priority), jobs in groups.items():
            harness_job.run_many(jobs, queue=queue, priority=priority)


def controlled_rate(control: str, base_rate: float) -> float:
    """The rate the harness asks for now: its control file's number (its high-load phase), else PRODUCER_RATE."""
    if not control:
        return base_rate
    try:
        return max(0.0, float(Path(control).read_text().strip()))
    except (OSError, ValueError):  # not written yet, or caught mid-write: the last word stands
        return base_rate


def drain_stdin() -> None:
    """Read and drop what the harness writes on stdin (its pacer's ``ENQUEUE n`` lines).

    The producer paces itself on the wall clock and the control file, as
    pg-boss's and procrastinate's adapters do. Reading keeps the pipe from
    filling: a harness that writes to a full pipe, or closes it before its
    SIGTERM, would otherwise block on us.
    """
    try:
        while sys.stdin.buffer.read1(65536):
            pass
    except (OSError, ValueError):
        pass


def count_depth(stats: Stats, stopping: threading.Event) -> None:
    from django.db import connection

    try:
        while not stopping.is_set():
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT count(*) FROM openworkflow_run WHERE status = 'pending' AND available_at <= now()"
                    )
                    depth = int(cursor.fetchone()[0])
                with stats.lock:
                    stats.depth = depth
            except Exception as exc:
                print(f"[openworkflow] depth query failed: {exc!r}", file=sys.stderr)
                connection.close()
            stopping.wait(0.2)
    finally:
        connection.close()


def sleep_to_tick(every_s: int, signalled: list[int]) -> bool:
    """Sleep to the next multiple of ``every_s`` seconds of the wall clock; False once a signal came."""
    deadline = time.time() + every_s - time.time() % every_s
    while not signalled and time.time() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.time())))
    return not signalled


def sample(stats: Stats, signalled: list[int], every_s: int) -> None:
    """Every ``every_s`` seconds, aligned to the wall clock: the contract's metrics, one record each."""
    if not sleep_to_tick(every_s, signalled):
        return
    last_enqueued = last_completed = last_failed = 0
    last_by_priority: collections.Counter[str] = collections.Counter()
    last = time.monotonic()
    fixed = os.environ.get("PRODUCER_MODE", "fixed") == "fixed"
    prioritised = bool(os.environ.get("JOB_PRIORITY_PATTERN", "").strip())
    while sleep_to_tick(every_s, signalled):
        now = time.monotonic()
        elapsed = max(0.001, now - last)
        last = now
        with stats.lock:
            enqueued, completed, failed = stats.enqueued, stats.completed, stats.failed
            by_priority = stats.by_priority.copy()
        p50, p95, p99 = stats.percentiles(now)
        metrics = [
            ("claim_p50_ms", p50, WINDOW_S),
            ("claim_p95_ms", p95, WINDOW_S),
            ("claim_p99_ms", p99, WINDOW_S),
            ("enqueue_rate", (enqueued - last_enqueued) / elapsed, float(every_s)),
            ("completion_rate", (completed - last_completed) / elapsed, float(every_s)),
            ("queue_depth", float(stats.depth), 0.0),
            ("producer_target_rate", stats.target_rate if fixed else 0.0, 0.0),
            ("retryable_failure_rate", (failed - last_failed) / elapsed, float(every_s)),
        ]
        if prioritised:
            metrics += [
                (
                    "aged_completion_rate" if key == "aged" else f"completed_{key}_rate",
                    (by_priority[key] - last_by_priority[key]) / elapsed,
                    float(every_s),
                )
                for key in PRIORITY_METRICS
            ]
        last_enqueued, last_completed, last_failed, last_by_priority = enqueued, completed, failed, by_priority
        at = now_iso()
        for metric, value, window in metrics:
            emit(
                {
                    "t": at,
                    "system": SYSTEM,
                    "kind": "adapter",
                    "subject_kind": "adapter",
                    "subject": "",
                    "metric": metric,
                    "value": value,
                    "window_s": window,
                }
            )


def main() -> int:
    scenario = os.environ.get("SCENARIO", "long_horizon")
    if scenario != "long_horizon":
        print(f"[openworkflow] unsupported scenario {scenario!r}: only long_horizon", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.harness.settings")
    import django
    from django.core.management import call_command
    from django.db import connection

    import django_openworkflow

    django.setup()
    # The package's own install path. The queue is not emptied here: the harness hands each cell a
    # new database, and a replica relaunched after a kill must leave the other replicas' runs alone.
    call_command("migrate", verbosity=0)
    connection.close()
    emit(
        {
            "kind": "descriptor",
            "system": SYSTEM,
            "event_tables": EVENT_TABLES,
            "extensions": [],
            "version": f"django-openworkflow@{django_openworkflow.__version__}",
            "schema_version": last_migration(),
            "db_name": (urlparse(os.environ["DATABASE_URL"]).path or "/").lstrip("/"),
            "started_at": now_iso(),
        }
    )
    stopping = threading.Event()
    # The handler takes no lock (an Event's set() could wait for ever on the lock the main thread
    # holds inside Event.wait()): it marks a list, and the sampler's short sleeps look at it.
    signalled: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: signalled.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: signalled.append(signum))
    stats = Stats()
    workers = start_workers(max(1, env_int("WORKER_COUNT", 32)), stats)
    threads = [
        threading.Thread(target=produce, args=(stats, stopping), name="producer", daemon=True),
        threading.Thread(target=count_depth, args=(stats, stopping), name="depth", daemon=True),
    ]
    threads.append(threading.Thread(target=drain_stdin, name="stdin", daemon=True))
    for thread in threads:
        thread.start()
    try:
        sample(stats, signalled, max(1, env_int("SAMPLE_EVERY_S", 5)))
    finally:
        stopping.set()
        for proc in workers:
            proc.send_signal(signal.SIGTERM)  # drains: the jobs in flight finish
        deadline = time.monotonic() + 4.0
        for proc in workers:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
        print("[openworkflow] long_horizon: stopped", file=sys.stderr)
    return 0


def last_migration() -> str:
    from django.db.migrations.recorder import MigrationRecorder

    names = MigrationRecorder.Migration.objects.filter(app="django_openworkflow").values_list("name", flat=True)
    return max(names, default="none")


if __name__ == "__main__":
    sys.exit(main())
