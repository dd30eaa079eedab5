"""Gauges of the workers and their queues, read from the heartbeat rows at scrape time (imports prometheus-client).

``workflow_queue_workers``: live workers serving each queue (a ``"*"``
worker counts for every queue); ``workflow_queue_unserved``: 1 while a
queue has due runs, is not paused and no live worker serves it (the alert
to set: it never clears by itself); ``workflow_queue_paused``: 1 while a
queue is paused. Yielded by :class:`~.collector.DatabaseCollector`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily

from ..definitions.registry import registry
from ..store import workers
from .labels import queue_label


def worker_gauges() -> Iterator[GaugeMetricFamily]:
    overview = workers.queue_overview([spec.queue for spec in registry.all()])
    served = GaugeMetricFamily(
        "workflow_queue_workers", "Live workers serving the queue (a '*' worker serves every queue).", labels=["queue"]
    )
    unserved = GaugeMetricFamily(
        "workflow_queue_unserved",
        "1 while runs are due in the queue, it is not paused and no live worker serves it.",
        labels=["queue"],
    )
    paused = GaugeMetricFamily("workflow_queue_paused", "1 while the queue is paused.", labels=["queue"])
    # Queues over the label cap share "_other": its values are the largest (or any) of theirs.
    by_label: dict[str, tuple[int, int, int]] = {}
    for queue in overview:
        label = queue_label(queue.name)
        values = (len(queue.served_by), int(queue.unserved), int(queue.paused))
        old = by_label.get(label)
        by_label[label] = (
            values if old is None else (min(old[0], values[0]), max(old[1], values[1]), max(old[2], values[2]))
        )
    for label, (count, is_unserved, is_paused) in sorted(by_label.items()):
        served.add_metric([label], count)
        unserved.add_metric([label], is_unserved)
        paused.add_metric([label], is_paused)
    yield served
    yield unserved
    yield paused
