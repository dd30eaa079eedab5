"""Priority aging (``aging.*``): the longest wait of low-priority runs behind a flood, aging off and on.

A backlog of 200 runs at priority 5 is started (``--quick``: 100), then, while
a claim loop in this process takes one run every 10 ms (a worker with one slot
and 10 ms steps: nothing is executed, a claimed run is finished at once), the
flood keeps coming (a new priority-5 run per claim, so the backlog never
drains) and a priority-0 run is started every second for the first 5 s. The
loop lasts 15 s (``--quick``: 12 s; ``--smoke``: 50 runs for 6 s, too short for
aging to raise the last low run: a smoke test of the code, not a figure). With aging on (``{"every": "1s",
"ceiling": 5}``) the loop also runs the aging sweep every 0.5 s, as a worker
looks twice a turn.

- ``aging.<off|on>.longest_wait_s``: the longest wait of the low runs, start
  to claim (a run never claimed counts as waiting until the loop ended);
- ``aging.<off|on>.unclaimed``: low runs still waiting when the loop ended;
- ``aging.on.bound_s``: the documented bound, ``(ceiling - 0 + 2) x every``
  plus the claims of the backlog of priority-5 runs due before a low run, at
  the loop's measured pace;
- ``aging.on.sweep_ms``: one sweep, median (it writes each waiting run below
  the ceiling once an interval).
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bench.processes import PhaseError

if TYPE_CHECKING:
    from bench.context import Bench

QUEUE = "bench-aging"
AGING = {"every": "1s", "ceiling": 5}
STEP_S = 0.01
LOW_RUNS = 5


def run(bench: Bench) -> None:
    backlog, seconds = bench.size(200, 100, 50), (6.0 if bench.smoke else 12.0 if bench.quick else 15.0)
    for aging in (False, True):
        measure(bench, aging, backlog, seconds)


def measure(bench: Bench, aging: bool, backlog: int, seconds: float) -> None:
    from django.db import connections
    from django.test import override_settings

    from bench.benchapp.workflows import bench_1
    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.store import get_backend
    from django_openworkflow.worker.aging import age_priorities

    label = "on" if aging else "off"
    wid = f"bench-aging-{uuid.uuid4().hex[:8]}"
    lease = timedelta(seconds=30)
    bench.reset_tables()
    low_started: dict[Any, float] = {}
    low_waits: dict[Any, float] = {}
    sweeps: list[float] = []
    claims = 0
    with override_settings(OPENWORKFLOW={"PRIORITY_AGING": AGING if aging else None}):
        bench_1.run_many([{"n": i} for i in range(backlog)], queue=QUEUE, priority=5)
        began = time.perf_counter()
        next_low, next_sweep = began, began
        while (now := time.perf_counter()) - began < seconds:
            if len(low_started) < LOW_RUNS and now >= next_low:
                low_started[bench_1.run({"n": -1}, queue=QUEUE, priority=0).id] = now
                next_low += 1.0
            if aging and now >= next_sweep:
                t0 = time.perf_counter()
                age_priorities()
                sweeps.append((time.perf_counter() - t0) * 1000.0)
                next_sweep += 0.5
            got = get_backend().claim(wid, 1, lease, (QUEUE,))
            claims += 1
            for claim in got:
                if claim.run.id in low_started:
                    low_waits[claim.run.id] = time.perf_counter() - low_started[claim.run.id]
            WorkflowRun.objects.filter(id__in=[c.run.id for c in got]).update(status="completed", worker_id=None)
            bench_1.run({"n": 0}, queue=QUEUE, priority=5)  # the flood keeps coming
            time.sleep(STEP_S)
        ended = time.perf_counter()
    if len(low_started) != LOW_RUNS:
        raise PhaseError(f"started {len(low_started)} of {LOW_RUNS} low-priority runs")
    unclaimed = LOW_RUNS - len(low_waits)
    waits = [low_waits.get(run_id, ended - started) for run_id, started in low_started.items()]
    bench.reset_tables()
    connections.close_all()
    shape = f"{LOW_RUNS} priority-0 runs behind {backlog} priority-5 ones, one more per claim, {STEP_S}s a claim"
    bench.emit(f"aging.{label}.longest_wait_s", max(waits), f"s ({shape})", 2)
    bench.emit(f"aging.{label}.unclaimed", unclaimed, f"low runs still waiting after {seconds:.0f} s", 0)
    if aging:
        every, ceiling = 1.0, 5  # AGING
        # The backlog (one run added per claim: it stays about this long) is due before a low run: its claims.
        period = (ended - began) / claims
        bench.emit("aging.on.bound_s", (ceiling + 2) * every + backlog * period, "s (documented bound)", 1)
        bench.emit("aging.on.sweep_ms", statistics.median(sweeps), "ms (one sweep, median)", 2)
