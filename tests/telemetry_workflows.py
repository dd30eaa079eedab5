"""Workflows for the metrics and tracing tests (in-process workers)."""

from django_openworkflow import RetryPolicy, workflow
from tests.testapp.workflows import executions, record


@workflow(
    name="telemetry-steps", queue="telemetry", step_retry_policy=RetryPolicy(maximum_attempts=3, initial_interval="1ms")
)
def telemetry_steps(ctx):
    """Two steps named "send" (keys send, send:1) and a step that fails its first attempt."""

    def flaky():
        record(ctx, "flaky")
        if executions(ctx, "flaky") == 1:
            raise ValueError("first attempt fails")
        return "ok"

    ctx.step.run("send", lambda: 1)
    ctx.step.run("send", lambda: 2)
    return ctx.step.run("flaky", flaky)


@workflow(name="telemetry-fails", queue="telemetry", step_retry_policy=RetryPolicy(maximum_attempts=1))
def telemetry_fails(ctx):
    def boom():
        raise ValueError("kaboom")

    return ctx.step.run("boom", boom)


@workflow(
    name="telemetry-retried",
    queue="telemetry",
    retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="1ms"),
    step_retry_policy=RetryPolicy(maximum_attempts=1),
)
def telemetry_retried(ctx):
    """Fails its first workflow-level attempt, completes the second."""

    def once():
        record(ctx, "once")
        if executions(ctx, "once") == 1:
            raise ValueError("first workflow attempt fails")
        return "ok"

    return ctx.step.run("once", once)


@workflow(name="telemetry-child", queue="telemetry")
def telemetry_child(ctx):
    return ctx.step.run("child-step", lambda: "child")


@workflow(name="telemetry-parent", queue="telemetry")
def telemetry_parent(ctx):
    """Waits for a signal (so it parks and resumes in another slice), then runs a child workflow."""
    got = ctx.step.wait_for_signal("go", timeout="1h")
    return {"got": got, "child": ctx.step.run_workflow(telemetry_child, None)}


@workflow(name="telemetry-dynamic", queue="telemetry")
def telemetry_dynamic(ctx):
    """Step names built from data: one per item."""
    for item in ctx.input["items"]:
        ctx.step.run(f"fetch-{item}", lambda: None)
    return len(ctx.input["items"])


@workflow(name="telemetry-async", queue="telemetry")
async def telemetry_async(ctx):
    """An async workflow: its steps run on the slice's event loop; its child continues the trace."""

    async def fetch():
        return 1

    first = await ctx.step.run("fetch", fetch)
    return [first, await ctx.step.run_workflow(telemetry_child, None)]
