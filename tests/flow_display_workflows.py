"""Workflows with flow control, for what the admin and ``manage.py workflows`` show of it (never run by a worker)."""

from django_openworkflow import workflow
from django_openworkflow.flow import Concurrency, RateLimit


@workflow(
    name="flow-display-charge",
    queue="payments",
    priority=5,
    concurrency=Concurrency(2, key=lambda input: input["customer"], count_parked=True),
    rate_limit=RateLimit(100, per="1m"),
)
def charge(ctx):
    return ctx.input
