"""Workflows for the Celery tests; imported by the test process and by the Celery workers."""

from django_openworkflow import workflow
from tests.testapp.workflows import record


@workflow(name="celery-sleepy")
def sleepy(ctx):
    """Three steps with a durable sleep between the first and the second."""
    first = ctx.step.run("one", lambda: record(ctx, "one") or ctx.input["n"])
    ctx.step.sleep("nap", ctx.input.get("nap", "1s"))
    second = ctx.step.run("two", lambda: record(ctx, "two") or first * 10)
    return ctx.step.run("three", lambda: record(ctx, "three") or second + 1)


@workflow(name="celery-child")
def child(ctx):
    return ctx.step.run("double", lambda: record(ctx, "double") or ctx.input["n"] * 2)


@workflow(name="celery-parent")
def parent(ctx):
    """Starts a child run and waits for it: both need dispatching."""
    doubled = ctx.step.run_workflow(child, {"n": ctx.input["n"]}, name="kid")
    return ctx.step.run("after", lambda: record(ctx, "after") or doubled + 1)
