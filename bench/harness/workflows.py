"""The harness's job as a workflow: one step that does ``JOB_WORK_MS`` of work.

The step reports, on the worker's stdout, when it picked the job up: one
line ``done <pickup_ms>`` per job once its work is done, read by the
adapter (adapter.py), which started the worker. The pickup time is counted
from the producer's clock reading just before it inserted the job, as the
harness's other adapters count it.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

from django_openworkflow import workflow

WORK_MS = int(os.environ.get("JOB_WORK_MS", "1"))


def _work(data: dict[str, Any]) -> None:
    pickup_ms = max(0.0, (time.time() - data["t"]) * 1000.0)
    if WORK_MS:
        time.sleep(WORK_MS / 1000.0)
    # One write per line: atomic on a pipe (under PIPE_BUF bytes), whichever slot thread writes it.
    os.write(1, f"done {pickup_ms:.3f}\n".encode())


@workflow(name="harness-job")
def harness_job(ctx: Any) -> None:
    ctx.step.run("work", functools.partial(_work, ctx.input))
