"""Workflows and runs with flow control, for what the admin and ``manage.py workflows`` show of it.

The workflow is never run by a worker.
"""

from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_openworkflow import workflow
from django_openworkflow.definitions.flow import BLOCKED_UNTIL, Concurrency, RateLimit


def blocked_run_fields(**fields: Any) -> dict[str, Any]:
    """A run waiting for a place under its concurrency limit, out of the claim's way (available at BLOCKED_UNTIL)."""
    return {
        "workflow_name": "charge",
        "queue": "payments",
        "concurrency_key": "charge/42",
        "concurrency_limit": 2,
        "blocked_at": timezone.now() - timedelta(minutes=5),
        "available_at": BLOCKED_UNTIL,
        **fields,
    }


@workflow(
    name="flow-display-charge",
    queue="payments",
    priority=5,
    concurrency=Concurrency(2, key=lambda input: input["customer"], count_parked=True),
    rate_limit=RateLimit(100, per="1m"),
)
def charge(ctx):
    return ctx.input
