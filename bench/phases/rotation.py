"""Key rotation under load (``rotation.*``): N stored payloads re-encrypted while a worker runs, interrupted, resumed.

N payloads (100,000; ``--quick`` 10,000; ``--smoke`` 1,000) are written
under an old key: N/2 finished runs with an input and an output each, as
``bulk_create`` writes them. Beside them, ``PENDING`` due runs of ``bench-3``
are started under the old key too. Then a ``runworkflows`` subprocess starts
with the keys ``[new, old]`` and works those runs (reading their inputs
under the old key, writing their journals under the new one), and a thread
of this process starts more ``bench-3`` runs one at a time, while this
process runs ``workflows rotate-keys``'s passes (``rotate_column`` over every
payload column, batches of 500): the first pass is interrupted (an exception
from its batch callback) halfway through the first column, the second pass
resumes where it stopped.

Printed: the values the passes re-encrypted and their rate (both passes,
the interruption included), the runs the worker finished meanwhile, and the
``--check`` that follows. The phase fails unless nothing is lost: every
stored payload reads back as written, every value was re-encrypted exactly
once (the passes' counts add up to N plus the pending runs' inputs), nothing
is left under the old key, and every ``bench-3`` run completed with its
output.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from bench.processes import PhaseError, loadavg

if TYPE_CHECKING:
    from bench.context import Bench

BATCH = 500
PENDING = 2_000


class Interrupted(Exception):
    """Raised from the first pass's batch callback: what a Ctrl-C between two batches does."""


def run(bench: Bench) -> dict:
    return measure(bench, bench.size(100_000, 10_000, 1_000))


def _keys(*keys: str):  # type: ignore[no-untyped-def]
    from django.conf import settings
    from django.test.utils import override_settings

    return override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": list(keys)})


def fill(old: str, finished: int, pending: int) -> None:
    """``finished`` runs with an input and an output, and ``pending`` due runs of bench-3, sealed with ``old``."""
    from django.db import connections
    from django.utils import timezone

    from django_openworkflow.definitions.registry import registry
    from django_openworkflow.models import WorkflowRun

    with _keys(old):
        now = timezone.now()
        for first in range(0, finished, 5_000):
            WorkflowRun.objects.bulk_create(
                [
                    WorkflowRun(
                        workflow_name="bench-rotated",
                        status="completed",
                        input=expected_input(i),
                        output=[i],
                        available_at=now,
                        finished_at=now,
                    )
                    for i in range(first, min(first + 5_000, finished))
                ]
            )
        registry.latest("bench-3").run_many(list(range(pending)))
    connections.close_all()


def expected_input(i: int) -> dict:
    return {"i": i, "email": f"user{i}@example.com", "note": "a payload of a few dozen bytes"}


class Starter(threading.Thread):
    """Start bench-3 runs one at a time (as views do) until stopped; ``started`` counts them."""

    def __init__(self) -> None:
        super().__init__(name="bench-rotation-starts", daemon=True)
        self.started = 0  # written by this thread only, read by the main one after join()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connections

        from django_openworkflow.definitions.registry import registry

        spec = registry.latest("bench-3")
        try:
            while not self.stop_event.is_set():
                spec.run(1_000_000 + self.started)
                self.started += 1
                time.sleep(0.01)
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            connections.close_all()


def measure(bench: Bench, payloads: int) -> dict:
    from cryptography.fernet import Fernet
    from django.db import connections

    from django_openworkflow.models import StepAttempt, WorkflowRun
    from django_openworkflow.store.rotation import PAYLOAD_COLUMNS, ColumnProgress, pending_counts, rotate_column

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    finished = payloads // 2
    pending = min(PENDING, max(finished // 10, 10))
    bench.reset_tables()
    t_fill = time.perf_counter()
    fill(old, finished, pending)
    bench.note(
        f"rotation: {2 * finished} payloads and {pending} due runs written in {time.perf_counter() - t_fill:.0f}s"
    )
    load_before = loadavg()

    proc, ready = bench.procs.spawn_worker(10, "rotation", env={"OWF_BENCH_KEYS": f"{new},{old}"})
    starter = Starter()
    figures: dict = {}
    try:
        give_up = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > give_up:
                raise PhaseError(f"rotation: worker not ready:\n{bench.procs.tail(proc)}")
            time.sleep(0.02)
        with _keys(new, old):
            starter.start()
            first_column = (finished + BATCH - 1) // BATCH
            seen: list[ColumnProgress] = []
            batches = 0

            def interrupt(progress: ColumnProgress) -> None:
                nonlocal batches
                batches += 1
                seen[:] = [progress]
                if batches == max(first_column // 2, 1):
                    raise Interrupted

            t0 = time.perf_counter()
            first_pass = 0
            try:
                for model, name in PAYLOAD_COLUMNS:
                    first_pass += rotate_column(model, name, batch_size=BATCH, on_batch=interrupt).rewritten
            except Interrupted:
                first_pass += seen[0].rewritten
            interrupted_at = time.perf_counter() - t0
            resumed = [rotate_column(model, name, batch_size=BATCH, on_batch=None) for model, name in PAYLOAD_COLUMNS]
            seconds = time.perf_counter() - t0
            rewritten = first_pass + sum(p.rewritten for p in resumed)
            changed = sum(p.changed for p in resumed)
            worked_during = WorkflowRun.objects.filter(workflow_name="bench-3", status="completed").count()
            load_during = loadavg()
            starter.stop_event.set()
            starter.join(30)
            if starter.error is not None:
                raise PhaseError(f"rotation: starting runs failed: {starter.error!r}")
            t_check = time.perf_counter()
            left = sum(count for _, count in pending_counts())
            check_s = time.perf_counter() - t_check

            total_bench3 = pending + starter.started
            give_up = time.monotonic() + bench.timeout
            done = WorkflowRun.objects.filter(workflow_name="bench-3", status="completed")
            while done.count() < total_bench3:
                if proc.poll() is not None or time.monotonic() > give_up:
                    raise PhaseError(f"rotation: {done.count()} of {total_bench3} bench-3 runs completed")
                time.sleep(0.2)
        with _keys(new):  # the old key removed: everything still reads
            lost = verify(finished)
            wrong = [run_input for run_input, output in done.values_list("input", "output") if output != run_input + 3]
            steps = StepAttempt.objects.filter(workflow_run__workflow_name="bench-3", status="completed").count()
    finally:
        starter.stop_event.set()
        bench.procs.stop(proc)
        connections.close_all()

    figures = {
        "values": rewritten,
        "seconds": seconds,
        "values_per_s": rewritten / seconds,
        "interrupted_after_s": interrupted_at,
        "first_pass_values": first_pass,
        "changed": changed,
        "worker_runs_during": worked_during,
        "check_s": check_s,
    }
    bench.emit("rotation.values", rewritten, f"values re-encrypted ({2 * finished} stored + {pending} due inputs)", 0)
    bench.emit("rotation.seconds", seconds, "s (both passes)")
    bench.emit("rotation.values_per_s", rewritten / seconds, "values/s", 0)
    bench.emit("rotation.first_pass_values", first_pass, f"values before the interruption ({interrupted_at:.1f}s)", 0)
    bench.emit("rotation.changed", changed, "values the worker wrote between a read and its rewrite", 0)
    bench.emit("rotation.worker_runs_during", worked_during, "bench-3 runs completed during the passes", 0)
    bench.emit("rotation.check_s", check_s, "s (rotate-keys --check)", 2)
    bench.emit("rotation.load", load_during, f"1-min load average (before: {load_before:.1f})")
    expected = 2 * finished + pending
    if left or lost or wrong or steps != 3 * total_bench3 or rewritten + changed != expected:
        raise PhaseError(
            f"rotation lost something: {left} values left under the old key, {lost} stored payloads read back "
            f"wrong, {len(wrong)} bench-3 outputs wrong, {steps} of {3 * total_bench3} steps, "
            f"{rewritten} + {changed} re-encrypted of {expected}"
        )
    bench.reset_tables()
    return figures


def verify(finished: int) -> int:
    """How many of the finished runs' payloads do not read back as written (or are gone)."""
    from django_openworkflow.models import WorkflowRun

    wrong = 0
    rows = WorkflowRun.objects.filter(workflow_name="bench-rotated").values_list("input", "output")
    for run_input, output in rows.iterator(chunk_size=5_000):
        if not isinstance(output, list) or run_input != expected_input(output[0]):
            wrong += 1
    return wrong + finished - WorkflowRun.objects.filter(workflow_name="bench-rotated").count()
