"""The workers' gauges: live workers per queue, unserved and paused queues, as Prometheus scrapes them."""

from __future__ import annotations

from datetime import timedelta

import pytest

from django_openworkflow.models import WorkerProcess
from django_openworkflow.store import get_backend, workers
from tests.fixtures.testapp.workflows import three_steps
from tests.metrics.test_metrics import fresh_label_caps, metrics_on, scrape, value  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def test_a_queue_with_due_runs_and_no_live_worker_is_unserved(client, metrics_on):  # noqa: F811
    workers.register("w1", host="h", pid=1, version="0", queues=["default"], slots=2, heartbeat=timedelta(seconds=5))
    workers.register("w2", host="h", pid=2, version="0", queues=["*"], slots=2, heartbeat=timedelta(seconds=5))
    three_steps.run({}, queue="emails")
    three_steps.run({}, queue="billing")
    workers.set_paused("billing", True)
    samples = scrape(client)
    assert value(samples, "workflow_queue_workers", queue="default") == 2
    assert value(samples, "workflow_queue_unserved", queue="emails") == 0  # w2 serves every queue
    # w2 dies: not seen for more than three of its heartbeats.
    WorkerProcess.objects.filter(worker_id="w2").update(last_seen_at=get_backend().now() - timedelta(seconds=16))
    samples = scrape(client)
    assert value(samples, "workflow_queue_workers", queue="emails") == 0
    assert value(samples, "workflow_queue_unserved", queue="emails") == 1
    assert value(samples, "workflow_queue_unserved", queue="billing") == 0  # paused: its runs wait on purpose
    assert value(samples, "workflow_queue_paused", queue="billing") == 1
    assert value(samples, "workflow_queue_unserved", queue="default") == 0
