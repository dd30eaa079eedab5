"""Workflows of the flow-control process tests (tests/test_flow_processes.py).

Their steps write :class:`Ledger` rows, each committed in its own
transaction before or after the step's work, so that the test process and
the other workers see them at once.
"""

import os
import time
import uuid

from django.db import connection, transaction

from django_openworkflow import workflow
from django_openworkflow.definitions.flow import Concurrency, Debounce, RateLimit

from .models import Ledger


def note(ctx, key, event, token):
    """Write one ledger row and commit it now."""
    if connection.in_atomic_block:
        raise RuntimeError("the ledger must be written outside any transaction, or other processes cannot see it")
    with transaction.atomic():
        Ledger.objects.create(run_id=ctx.run_id, key=key, event=event, token=token, pid=os.getpid())


def ledgered_work(ctx, key):
    """The step: record "start", work (sleep) for ``pause`` seconds, record "end".

    With ``hang_first_time`` the first execution hangs (its worker is
    killed by the test) and later ones work normally.
    """
    token = uuid.uuid4().hex
    note(ctx, key, "start", token)
    if ctx.input.get("hang_first_time") and Ledger.objects.filter(run_id=ctx.run_id, event="start").count() == 1:
        time.sleep(300)
    time.sleep(ctx.input.get("pause", 0.03))
    note(ctx, key, "end", token)
    return ctx.input["n"]


@workflow(name="flow-limited", concurrency=Concurrency(2, key=lambda input: input["customer"]))
def limited(ctx):
    """At most two runs per customer hold a worker at once."""
    return ctx.step.run("work", lambda: ledgered_work(ctx, ctx.input["customer"]))


@workflow(name="flow-rated", rate_limit=RateLimit(5, per="1s"))
def rated(ctx):
    """At most five runs start in any one second."""
    return ctx.step.run("work", lambda: ctx.input["n"])


@workflow(name="flow-ordered")
def ordered(ctx):
    """Runs started with different priorities."""
    return ctx.step.run("work", lambda: ledgered_work(ctx, "ordered"))


@workflow(name="flow-debounced", debounce=Debounce("1s", key=lambda input: input["doc"]))
def debounced(ctx):
    """Starts for one document within a second of each other become one run; it returns its input."""
    return ctx.step.run("work", lambda: ctx.input)


@workflow(name="flow-pdf", queue="pdf")
def pdf(ctx):
    """A run of queue "pdf": only workers started with ``--queue pdf`` claim it."""
    return ctx.step.run("work", lambda: ctx.input["n"])


@workflow(name="flow-default")
def default(ctx):
    """A run of the default queue."""
    return ctx.step.run("work", lambda: ctx.input["n"])
