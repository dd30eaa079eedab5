"""The harness's job as a workflow: one step that does ``JOB_WORK_MS`` of work.

The step reports, on the worker's stdout, when it picked the job up: one
line ``done <pickup_ms>`` per job once its work is done, read by the
adapter (adapter.py), which started the worker. The pickup time is counted
from the producer's clock reading just before it inserted the job, as the
harness's other adapters count it.

With ``OWF_HARNESS_LEDGER`` set (a folder; the phased cells set it), each
execution of the step's body that succeeds also appends its run's id to a
file of that folder, one per worker process, before it reports: the
driver counts there how often each run's body ran, which the database alone
cannot say (a body whose result never committed leaves no row).

The harness's per-phase knobs (its ``PHASES.md`` §4), as awa's adapter
does them:

- ``WORKER_FAIL_MODE``: ``success``; ``retryable-first``, the first attempt
  of every job whose sequence number is a multiple of ``JOB_FAIL_FIRST_MOD``
  fails (the step's retry policy then retries it); ``terminal-always``,
  every attempt raises :class:`NonRetryableError`, so the run fails (our
  dead letter: a ``failed`` run kept in the run table). Each failure
  reports ``fail`` on stdout (the harness's ``retryable_failure_rate``
  counts both kinds, as awa's does).
- ``JOB_MAX_ATTEMPTS``: the step's ``maximum_attempts``.
- ``JOB_PRIORITY_PATTERN`` (set by the producer in the input's ``q``, the
  harness's priority 1 to 4, 1 first): the step also reports the harness
  priority it was inserted with and the one it was claimed at, read from
  its run's row (one query by primary key). Aging's sweep gives a run its
  declared priority back once it is no longer waiting, so a claim the
  sweep reached in the few milliseconds before the step reads its row
  counts as not aged.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_openworkflow import NonRetryableError, RetryPolicy, workflow

WORK_MS = int(os.environ.get("JOB_WORK_MS", "1"))
LEDGER = os.environ.get("OWF_HARNESS_LEDGER", "")
FAIL_MODE = os.environ.get("WORKER_FAIL_MODE", "success")
FAIL_FIRST_MOD = int(os.environ.get("JOB_FAIL_FIRST_MOD", "0") or 0)
MAX_ATTEMPTS = os.environ.get("JOB_MAX_ATTEMPTS", "")
# Short and flat: the harness's cells are minutes long, and a retried job should complete within them.
RETRY = (
    RetryPolicy(
        initial_interval="1s", backoff_coefficient=1.0, maximum_interval="1s", maximum_attempts=int(MAX_ATTEMPTS)
    )
    if MAX_ATTEMPTS
    else None
)
# Opened at import, once per process; each line is one O_APPEND write, so whole whichever slot thread writes.
_LEDGER_FD = (
    os.open(os.path.join(LEDGER, f"{os.getpid()}.ledger"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if LEDGER
    else -1
)


def our_priority(harness_priority: int) -> int:
    """The harness's priority 1 (first) to 4 (last) as ours, where higher is claimed first: 3 to 0, and back."""
    return 4 - harness_priority


def _claimed_priority(run_id: str) -> int:
    """The harness priority of the run's row now (its aged one while aging has raised it)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT priority FROM openworkflow_run WHERE id = %s", [run_id])
        return our_priority(int(cursor.fetchone()[0]))  # the mapping is its own inverse


def _work(data: dict[str, Any], run_id: str, attempt: int) -> None:
    pickup_ms = max(0.0, (time.time() - data["t"]) * 1000.0)
    if WORK_MS:
        time.sleep(WORK_MS / 1000.0)
    # One write per line: atomic on a pipe (under PIPE_BUF bytes), whichever slot thread writes it.
    if FAIL_MODE == "terminal-always":
        os.write(1, b"fail\n")
        raise NonRetryableError("synthetic terminal failure (WORKER_FAIL_MODE=terminal-always)")
    if attempt == 1 and FAIL_FIRST_MOD and data.get("s", 1) % FAIL_FIRST_MOD == 0:
        os.write(1, b"fail\n")
        raise RuntimeError("synthetic failure of the first attempt (JOB_FAIL_FIRST_MOD)")
    if LEDGER:
        os.write(_LEDGER_FD, f"{run_id}\n".encode())
    priorities = f" {data['q']} {_claimed_priority(run_id)}" if "q" in data else ""
    os.write(1, f"done {pickup_ms:.3f}{priorities}\n".encode())


@workflow(name="harness-job")
def harness_job(ctx: Any) -> None:
    ctx.step.run("work", lambda: _work(ctx.input, str(ctx.run_id), ctx.attempt().number), retry_policy=RETRY)
