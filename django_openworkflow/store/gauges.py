"""Read-only queries behind the metrics' gauges: the queue's depth and age, the runs in flight.

Each is one aggregate query over an index, whatever the number of runs:
due runs are read from the claim indexes (partial on the claimable
statuses, by queue and due time), held runs from (status, worker_id).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min

from ..models import Approval, ApprovalStatus, WorkflowRun
from ..states import FINISHED_STATUSES


@dataclass(frozen=True)
class QueueDepth:
    queue: str
    due: int
    oldest_due_at: datetime | None


def due_by_queue(now: datetime) -> list[QueueDepth]:
    """Per queue with any: runs due at ``now`` that no worker holds, and the earliest due time among them.

    A run held by a live worker is due only once its lease has expired, so
    this counts runs waiting for a worker: new, woken, retry due, or whose
    worker died.
    """
    rows = (
        WorkflowRun.objects.due(now)
        .order_by()
        .values("queue")
        .annotate(due=Count("id"), oldest=Min("available_at"))
        .values_list("queue", "due", "oldest")
    )
    return [QueueDepth(queue, due, oldest) for queue, due, oldest in rows]


def held_by_workflow() -> dict[str, int]:
    """Per workflow with any: the runs a worker holds right now (in flight)."""
    rows = WorkflowRun.objects.held().order_by().values("workflow_name").annotate(n=Count("id"))
    return {row["workflow_name"]: row["n"] for row in rows}


def overdue_tasks_by_workflow(now: datetime) -> dict[str, int]:
    """Per workflow with any: open approvals and tasks past their ``due`` (not timed out, of unfinished runs)."""
    rows = (
        Approval.objects.filter(status=ApprovalStatus.OPEN, due_at__lte=now, timeout_at__gt=now)
        .exclude(workflow_run__status__in=FINISHED_STATUSES)
        .order_by()
        .values("workflow_run__workflow_name")
        .annotate(n=Count("id"))
    )
    return {row["workflow_run__workflow_name"]: row["n"] for row in rows}
