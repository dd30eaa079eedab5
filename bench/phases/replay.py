"""Replay scaling (``replay.*``), in-process: ``claim_run`` + ``execute_slice`` directly, no worker.

``exec_per_step_{10,1000}``: one slice running a fresh 10- or 1,000-step ``bench-long`` run to
completion, per step; ``replay_per_step_*``: the same run rewound to pending and executed
again, every step replayed from the journal. ``*_ratio`` = 1,000-step / 10-step per-step cost.
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from bench.processes import PhaseError

if TYPE_CHECKING:
    from bench.context import Bench


def run(bench: Bench) -> None:
    quick = bench.quick
    measure(bench, 5 if quick else 20, 1 if quick else 3)


def measure(bench: Bench, reps_small: int, reps_big: int) -> None:
    from django.db import connections
    from django.utils import timezone

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.engine.execute import Outcome, execute_slice
    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.store import get_backend

    bench.reset_tables()
    spec = registry.latest("bench-long")
    wid = f"bench-replay-{uuid.uuid4().hex[:8]}"
    lease = timedelta(minutes=5)

    def timed_slice(run_id) -> float:  # type: ignore[no-untyped-def]
        claimed = get_backend().claim_run(run_id, wid, lease)
        if claimed is None:
            raise PhaseError(f"could not claim run {run_id}")
        t0 = time.perf_counter()
        res = execute_slice(get_backend(), claimed)
        dt = time.perf_counter() - t0
        if res.outcome != Outcome.COMPLETED:
            raise PhaseError(f"replay run ended {res.outcome}: {res.detail}")
        return dt

    def rewind(run_id) -> None:  # type: ignore[no-untyped-def]
        WorkflowRun.objects.filter(id=run_id).update(
            status="pending",
            worker_id=None,
            output=None,
            finished_at=None,
            available_at=timezone.now() - timedelta(seconds=1),
        )

    def per_step_ms(steps: int, reps: int) -> tuple[float, float]:
        fresh, again = [], []
        for _ in range(reps):
            handle = spec.run({"steps": steps})
            fresh.append(timed_slice(handle.id) / steps)
            rewind(handle.id)
            again.append(timed_slice(handle.id) / steps)
        return statistics.median(fresh) * 1000.0, statistics.median(again) * 1000.0

    per_step_ms(10, 2)  # warm up
    small_exec, small_replay = per_step_ms(10, reps_small)
    big_exec, big_replay = per_step_ms(1000, reps_big)
    connections.close_all()
    bench.emit("replay.exec_per_step_10", small_exec, "ms/step (fresh 10-step run, one slice)", 3)
    bench.emit("replay.exec_per_step_1000", big_exec, "ms/step (fresh 1000-step run, one slice)", 3)
    bench.emit("replay.exec_ratio", big_exec / small_exec, "x (1000-step / 10-step per-step cost)", 2)
    bench.emit("replay.replay_per_step_10", small_replay, "ms/step (re-executing a completed 10-step history)", 4)
    bench.emit("replay.replay_per_step_1000", big_replay, "ms/step (re-executing a completed 1000-step history)", 4)
    bench.emit("replay.replay_ratio", big_replay / small_replay, "x (1000-step / 10-step per-step cost)", 2)
