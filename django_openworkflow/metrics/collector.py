"""Gauges read from the workflow database at scrape time (imports prometheus-client).

Computed by the process that answers the scrape, from the rows every
process shares, so they are right whichever process that is and are never
summed over processes. Only ``/metrics`` serves them: a worker's own
exporter (``runworkflows --metrics-port``) leaves them out, or every worker
would report the same queue again.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..flow import DEFAULT_QUEUE
from ..registry import registry
from ..store import get_backend
from ..store.telemetry import due_by_queue, held_by_workflow


class DatabaseCollector(Collector):
    """``workflow_runs_due``, ``workflow_oldest_due_run_age_seconds`` and ``workflow_runs_in_flight``."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = get_backend().now()
        depths = {depth.queue: depth for depth in due_by_queue(now)}
        # Every queue this process's workflows declare gets a series, 0 when nothing is due.
        queues = sorted({DEFAULT_QUEUE, *(spec.queue for spec in registry.all()), *depths})
        due = GaugeMetricFamily(
            "workflow_runs_due", "Runs due now that no worker has claimed (the queue's backlog).", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "workflow_oldest_due_run_age_seconds",
            "How long the longest-waiting due run has been due (0 when none is).",
            labels=["queue"],
        )
        for queue in queues:
            depth = depths.get(queue)
            due.add_metric([queue], depth.due if depth else 0)
            oldest = depth.oldest_due_at if depth else None
            age.add_metric([queue], max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
        yield due
        yield age
        in_flight = GaugeMetricFamily(
            "workflow_runs_in_flight", "Runs a worker holds right now (executing a slice).", labels=["workflow"]
        )
        held = held_by_workflow()
        for name in sorted({*(spec.name for spec in registry.all()), *held}):
            in_flight.add_metric([name], held.get(name, 0))
        yield in_flight
