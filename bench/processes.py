"""The suite's subprocesses and what it reads about them from /proc.

* the worker: ``python -m django runworkflows --settings=bench.settings``, one per
  configuration, with bench.benchapp's hooks (ready file, in-process commit counting);
* the producer: ``bench/run.py _produce``, which starts the runs (:func:`produce` is its body);
* py-spy, with ``--profile``;
* CPU (machine-wide from /proc/stat, per process from /proc/<pid>/stat), RSS, load average.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from bench.databases import PRODUCER_APP, WORKER_APP
from bench.report import NAN

ROOT = Path(__file__).resolve().parent.parent
RUN_PY = Path(__file__).resolve().parent / "run.py"  # the producer is `run.py _produce`


class PhaseError(Exception):
    pass


# --------------------------------------------------------------------------- readings from /proc


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


def loadavg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return NAN


def read_commits(path: Path | None) -> int:
    """Transactions counted by bench.benchapp's hook in one process (0 if it wrote nothing)."""
    try:
        with open(path) as fh:  # type: ignore[arg-type]
            return int(json.load(fh)["commits"])
    except (TypeError, OSError, ValueError, KeyError):
        return 0


# --------------------------------------------------------------------------- starting and stopping them


class Processes:
    """The subprocesses of one database's run; logs and hook files go to ``tmp``."""

    def __init__(self, db: str, tmp: Path, poll: str, note) -> None:  # type: ignore[no-untyped-def]
        self.db = db
        self.tmp = tmp
        self.poll = poll
        self.note = note
        self.children: list[subprocess.Popen] = []

    def child_env(self, **extra: str) -> dict:
        env = dict(os.environ)
        env["BENCH_DB"] = self.db
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        for key in ("BENCH_READY_FILE", "BENCH_COUNT_FILE", "BENCH_SOAK_DIR"):
            env.pop(key, None)
        env.update(extra)
        return env

    # ---- the worker

    def spawn_worker(
        self,
        conc: int,
        label: str,
        count_file: Path | None = None,
        queues: tuple[str, ...] = (),
        options: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> tuple[subprocess.Popen, Path]:
        """Start ``runworkflows``; returns it and the file it touches at its first connection.

        ``options``: more ``runworkflows`` options (e.g. ``--lease 3s``); ``env``: more environment.
        """
        ready = self.tmp / f"ready-{label}"
        with suppress(FileNotFoundError):
            ready.unlink()
        extra = {"BENCH_READY_FILE": str(ready), "BENCH_APP_NAME": WORKER_APP, **(env or {})}
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
            self.poll,
            *(arg for queue in queues for arg in ("--queue", queue)),
            *options,
        ]
        log_path = self.tmp / f"worker-{label}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.child_env(**extra), stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = str(log_path)  # type: ignore[attr-defined]
        self.children.append(proc)
        return proc, ready

    def start_worker(
        self, conc: int, label: str, count_file: Path | None = None, queues: tuple[str, ...] = ()
    ) -> subprocess.Popen:
        """Start a worker and wait until it is in its loop, then leave it idle for a second."""
        proc, ready = self.spawn_worker(conc, label, count_file, queues)
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

    # ---- the producer

    def start_producer(self, workflow: str, n: int, batch: int = 0, count_file: Path | None = None) -> subprocess.Popen:
        extra = {"BENCH_APP_NAME": PRODUCER_APP}
        if count_file is not None:
            extra["BENCH_COUNT_FILE"] = str(count_file)
        cmd = [
            sys.executable,
            str(RUN_PY),
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

    # ---- py-spy (--profile)

    def start_profiler(self, pid: int, out: Path):  # type: ignore[no-untyped-def]
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


# --------------------------------------------------------------------------- the producer's side


def produce(args: argparse.Namespace) -> None:
    """Start ``--count`` runs one ``spec.run()`` at a time, after a GO on stdin.

    With ``--batch B``, every B starts share one transaction (used only to fill
    the memory phase quickly). Prints one JSON line with the timings.
    """
    import django

    django.setup()
    from django.db import connections, transaction

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

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
