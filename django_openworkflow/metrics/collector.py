"""Gauges read from the workflow database at scrape time (imports prometheus-client).

Computed by the process that answers the scrape, from the rows every
process shares, so they are right whichever process that is and are never
summed over processes. Only ``/metrics`` serves them: a worker's own
exporter (``runworkflows --metrics-port``) leaves them out, or every worker
would report the same queue again.

Their labels go through the same caps as the counters' (:mod:`.labels`):
queues that a start named and no workflow declares, and workflows no longer
registered, beyond the caps are summed under ``"_other"``.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..definitions.flow import DEFAULT_QUEUE
from ..definitions.registry import registry
from ..store import get_backend
from ..store.gauges import QueueDepth, due_by_queue, held_by_workflow, overdue_tasks_by_workflow
from .labels import queue_label, workflow_label
from .workers import worker_gauges


class DatabaseCollector(Collector):
    """``workflow_runs_due``, ``workflow_oldest_due_run_age_seconds``, ``workflow_runs_in_flight``,
    ``workflow_overdue_tasks``; workers.py's."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = get_backend().now()
        depths: dict[str, QueueDepth] = {}
        for depth in due_by_queue(now):
            label = queue_label(depth.queue)
            depths[label] = _merged(depths[label], depth) if label in depths else depth
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
            found = depths.get(queue)
            due.add_metric([queue], found.due if found else 0)
            oldest = found.oldest_due_at if found else None
            age.add_metric([queue], max((now - oldest).total_seconds(), 0.0) if oldest is not None else 0.0)
        yield due
        yield age
        in_flight = GaugeMetricFamily(
            "workflow_runs_in_flight", "Runs a worker holds right now (executing a slice).", labels=["workflow"]
        )
        held: dict[str, int] = {}
        for name, count in held_by_workflow().items():
            label = workflow_label(name)
            held[label] = held.get(label, 0) + count
        for name in sorted({*(spec.name for spec in registry.all()), *held}):
            in_flight.add_metric([name], held.get(name, 0))
        yield in_flight
        overdue = GaugeMetricFamily(
            "workflow_overdue_tasks",
            "Open human tasks and approvals past their due time (due=), not timed out.",
            labels=["workflow"],
        )
        late: dict[str, int] = {}
        for name, count in overdue_tasks_by_workflow(now).items():
            label = workflow_label(name)
            late[label] = late.get(label, 0) + count
        for name in sorted({*(spec.name for spec in registry.all()), *late}):
            overdue.add_metric([name], late.get(name, 0))
        yield overdue
        yield from worker_gauges()  # workers.py: live workers, unserved and paused queues


def _merged(one: QueueDepth, other: QueueDepth) -> QueueDepth:
    """Two queues' backlogs under one label: the runs added up, the earliest due time of the two."""
    oldest = [at for at in (one.oldest_due_at, other.oldest_due_at) if at is not None]
    return QueueDepth(one.queue, one.due + other.due, min(oldest) if oldest else None)
