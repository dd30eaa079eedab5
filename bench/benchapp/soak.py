"""The soak phase's worker-side instruments, on when ``BENCH_SOAK_DIR`` names a directory.

Each worker process appends to ``<dir>/ledger-<pid>.log``, one line per event:

* ``S <time> <run id> <step> <pid> <tid> <due> <key>``: a step body began on thread
  ``tid`` (``key`` is the concurrency key, ``-`` for a run without a limit; ``due`` is
  when the starter called ``run()``);
* ``E <time> <run id> <step> <pid> <tid>``: that step body returned;
* ``C <time> <run id> <pid> <outcome>``: the slice that executed the run ended
  (``hooks.run_finished``: the run's completion is committed by then);
* ``R <time> <pid> <rows>``: the heartbeat thread ran its lease-renewal UPDATE,
  which extended ``rows`` leases.

The ledger is a file written with one ``write()`` per line on an ``O_APPEND``
descriptor, never a database row: nothing in it is rolled back with the step's
transaction, and a line written before a SIGKILL is in the page cache, so a step
that executes twice shows up twice.

Python before 3.14 does not give threads an OS-level name, so every thread of the
process names itself (``prctl(PR_SET_NAME)``) after its Python name when it starts:
the orchestrator reads ``/proc/<pid>/task/*/comm`` to see ``owf-slot-N`` and
``owf-heartbeat`` threads.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any

PR_SET_NAME = 15  # linux/prctl.h

_lock = threading.Lock()  # guards _fd: slot threads, the heartbeat thread and the hooks all write
_fd: int | None = None


def ledger_dir() -> str | None:
    return os.environ.get("BENCH_SOAK_DIR") or None


def write(line: str) -> None:
    """Append one line to this process's ledger (opened on first use, after any fork)."""
    global _fd
    directory = ledger_dir()
    if directory is None:
        return
    data = (line + "\n").encode()
    with _lock:
        if _fd is None:
            path = os.path.join(directory, f"ledger-{os.getpid()}.log")
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(_fd, data)


def step_body(run_id: Any, step: str, spec: dict) -> int:
    """What a soak step does: record its start, sleep ``spec["ms"]``, record its end."""
    # The thread tells apart two executions of one step open at once in one process.
    me = f"{os.getpid()} {threading.get_native_id()}"
    key = spec.get("k")
    write(f"S {time.time():.6f} {run_id} {step} {me} {spec['due']:.6f} {'-' if key is None else key}")
    time.sleep(spec["ms"] / 1000.0)
    write(f"E {time.time():.6f} {run_id} {step} {me}")
    return int(spec["ms"])


def _on_run_finished(sender: Any, run_id: Any = None, status: str = "", **kwargs: Any) -> None:
    write(f"C {time.time():.6f} {run_id} {os.getpid()} {status}")


_started = time.monotonic()
_break_after = float(os.environ.get("BENCH_SOAK_BREAK_HEARTBEAT") or "inf")


def _count_renewals(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
    """Django execute wrapper: log the heartbeat thread's lease UPDATEs with the rows they touched.

    With ``BENCH_SOAK_BREAK_HEARTBEAT=<seconds>`` (``run.py --soak-break-heartbeat``), the
    heartbeat's first UPDATE after that long raises instead: the heartbeat thread dies the way
    issue 26's did, which the soak must detect.
    """
    heartbeat = threading.current_thread().name == "owf-heartbeat" and sql.lstrip()[:6].upper() == "UPDATE"
    if heartbeat and time.monotonic() - _started > _break_after:
        raise RuntimeError("bench: the heartbeat broken on purpose (--soak-break-heartbeat)")
    began = time.monotonic()
    result = execute(sql, params, many, context)
    if heartbeat:
        took_ms = (time.monotonic() - began) * 1000.0
        write(f"R {time.time():.6f} {os.getpid()} {context['cursor'].rowcount} {took_ms:.1f}")
    return result


def _on_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    if _count_renewals not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count_renewals)


def _name_native_threads() -> None:
    """Make every thread started from now on set its OS name (15 bytes at most) to its Python name."""
    libc = ctypes.CDLL(None, use_errno=True)
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def named_bootstrap(self: threading.Thread) -> None:
        libc.prctl(PR_SET_NAME, self.name.encode()[:15], 0, 0, 0)
        bootstrap(self)

    threading.Thread._bootstrap_inner = named_bootstrap  # type: ignore[attr-defined]


def install() -> None:
    """Called by the bench app's ``ready()`` when ``BENCH_SOAK_DIR`` is set."""
    from django.db.backends.signals import connection_created

    from django_openworkflow import hooks

    _name_native_threads()
    hooks.run_finished.connect(_on_run_finished, dispatch_uid="bench-soak-finished")
    connection_created.connect(_on_connection, dispatch_uid="bench-soak-renewals")
