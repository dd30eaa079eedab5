"""The counters and histograms, and the hook receivers that feed them (imports prometheus-client).

They live in prometheus-client's default registry, next to the process's
own metrics and any of yours. Label values are workflow names, queue names,
statuses, signal names and step names without their repeat counter
(``send:1`` counts as ``send``): never run ids. Every label but ``status``
(a fixed set) goes through a cap of :mod:`.labels`, so a caller who picks
names (a signal's, a queue's) or a workflow that builds step names from
data (``f"fetch-{url}"``) cannot make one series per value: beyond the cap
they are counted under ``"_other"``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from .. import hooks
from .labels import queue_label, signal_label, step_label, workflow_label

RUN_BUCKETS = (0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 24 * 3600, 7 * 24 * 3600, float("inf"))
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, float("inf"))

RUNS_STARTED = Counter(
    "workflow_runs_started", "Runs a worker began executing (their first slice).", ["workflow", "queue"]
)
RUNS_FINISHED = Counter(
    "workflow_runs_finished",
    "Runs that ended, by status: completed, failed, canceled, continued (handed over to a successor).",
    ["workflow", "queue", "status"],
)
RUNS_RETRIED = Counter(
    "workflow_runs_retried",
    "Workflow-level retries: a run failed and its retry policy scheduled another attempt.",
    ["workflow", "queue"],
)
RUN_DURATION = Histogram(
    "workflow_run_duration_seconds",
    "From a run's first start to its end (sleeps and waits included), by the database clock.",
    ["workflow", "status"],
    buckets=RUN_BUCKETS,
)
STEP_DURATION = Histogram(
    "workflow_step_duration_seconds",
    "How long a step attempt's code ran (ctx.step.run), failed attempts included.",
    ["workflow", "step"],
    buckets=STEP_BUCKETS,
)
STEP_RETRIES = Counter(
    "workflow_step_retries", "Step attempts that retried a failed attempt (attempt 2 and later).", ["workflow", "step"]
)
STEP_FAILURES = Counter("workflow_step_failures", "Step attempts whose code raised.", ["workflow", "step"])
SIGNALS = Counter("workflow_signals", "Signals sent to runs (send_signal), by signal name.", ["workflow", "signal"])
PRUNED = Counter("workflow_retention_swept", "Finished runs deleted by retention.", ["workflow"])

# ``sender`` is the run's workflow name, read from the database (a run of code since removed may name anything).


def _run_started(sender: str, *, queue: str = "", **kwargs: Any) -> None:
    RUNS_STARTED.labels(workflow_label(sender), queue_label(queue)).inc()


def _run_finished(sender: str, *, status: str, queue: str = "", seconds: float | None = None, **kwargs: Any) -> None:
    workflow = workflow_label(sender)
    RUNS_FINISHED.labels(workflow, queue_label(queue), status).inc()
    if seconds is not None:
        RUN_DURATION.labels(workflow, status).observe(max(seconds, 0.0))


def _run_parked(sender: str, *, queue: str = "", outcome: str = "", **kwargs: Any) -> None:
    if outcome == "retry":
        RUNS_RETRIED.labels(workflow_label(sender), queue_label(queue)).inc()


def _step_finished(sender: str, *, step: str, status: str, seconds: float, attempt: int = 1, **kwargs: Any) -> None:
    workflow = workflow_label(sender)
    label = step_label(workflow, step)
    STEP_DURATION.labels(workflow, label).observe(max(seconds, 0.0))
    if attempt > 1:
        STEP_RETRIES.labels(workflow, label).inc()
    if status == "failed":
        STEP_FAILURES.labels(workflow, label).inc()


def _signal_sent(sender: str, *, signal_name: str, **kwargs: Any) -> None:
    workflow = workflow_label(sender)
    SIGNALS.labels(workflow, signal_label(workflow, signal_name)).inc()


def _runs_pruned(sender: str, *, count: int, **kwargs: Any) -> None:
    PRUNED.labels(workflow_label(sender)).inc(count)


RECEIVERS = (
    (hooks.run_started, _run_started),
    (hooks.run_finished, _run_finished),
    (hooks.run_parked, _run_parked),
    (hooks.step_finished, _step_finished),
    (hooks.signal_sent, _signal_sent),
    (hooks.runs_pruned, _runs_pruned),
)


def connect() -> None:
    for signal, receiver in RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"django_openworkflow.metrics.{receiver.__name__}")


def disconnect() -> None:
    for signal, receiver in RECEIVERS:
        signal.disconnect(dispatch_uid=f"django_openworkflow.metrics.{receiver.__name__}")
