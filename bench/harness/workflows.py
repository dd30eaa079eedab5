"""The harness's job as a workflow: one step that does ``JOB_WORK_MS`` of work.

The step reports, on the worker's stdout, when it picked the job up: one
line ``done <pickup_ms>`` per job once its work is done, read by the
adapter (adapter.py), which started the worker. The pickup time is counted
from the producer's clock reading just before it inserted the job, as the
harness's other adapters count it.

With ``OWF_HARNESS_LEDGER`` set (a folder; the chaos and pressure cells
set it), each execution of the step's body also appends its run's id to a
file of that folder, one per worker process, before it reports: the
driver counts there how often each run's body ran, which the database alone
cannot say (a body whose result never committed leaves no row).
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from django_openworkflow import workflow

WORK_MS = int(os.environ.get("JOB_WORK_MS", "1"))
LEDGER = os.environ.get("OWF_HARNESS_LEDGER", "")
# Opened at import, once per process; each line is one O_APPEND write, so whole whichever slot thread writes.
_LEDGER_FD = (
    os.open(os.path.join(LEDGER, f"{os.getpid()}.ledger"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if LEDGER
    else -1
)


def _work(data: dict[str, Any], run_id: str) -> None:
    pickup_ms = max(0.0, (time.time() - data["t"]) * 1000.0)
    if WORK_MS:
        time.sleep(WORK_MS / 1000.0)
    if LEDGER:
        os.write(_LEDGER_FD, f"{run_id}\n".encode())
    # One write per line: atomic on a pipe (under PIPE_BUF bytes), whichever slot thread writes it.
    os.write(1, f"done {pickup_ms:.3f}\n".encode())


@workflow(name="harness-job")
def harness_job(ctx: Any) -> None:
    ctx.step.run("work", functools.partial(_work, ctx.input, str(ctx.run_id)))
