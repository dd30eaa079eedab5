"""The benchmark workflows: trivial steps, so the engine's own cost is what is measured.

Each step returns a small value that the next step consumes (like the peers'
benchmarks in ../shared/bench-peers).
"""

from decimal import Decimal

from django_openworkflow import workflow
from django_openworkflow.definitions.flow import Concurrency


@workflow(name="bench-1")
def bench_1(ctx):
    return ctx.step.run("s1", lambda: {"v": (ctx.input or 0) + 1})["v"]


@workflow(name="bench-3")
def bench_3(ctx):
    a = ctx.step.run("s1", lambda: {"v": (ctx.input or 0) + 1})
    b = ctx.step.run("s2", lambda: {"v": a["v"] + 1})
    c = ctx.step.run("s3", lambda: {"v": b["v"] + 1})
    return c["v"]


# bench-3 with flow control switched on: its own queue (the worker is started with
# --queue bench), a priority and a concurrency limit per key that never binds.
bench_3_flow = workflow(
    name="bench-3-flow", queue="bench", priority=1, concurrency=Concurrency(1000, key=lambda n: (n or 0) % 5)
)(bench_3.fn)


@workflow(name="bench-4")
def bench_4(ctx):
    a = ctx.step.run("s1", lambda: (ctx.input or 0) + 1)
    b = ctx.step.run("s2", lambda: a + 1)
    c = ctx.step.run("s3", lambda: {"v": b + 1})
    d = ctx.step.run("s4", lambda: c["v"] + 1)
    return d


@workflow(name="bench-long")
def bench_long(ctx):
    """``input["steps"]`` steps, each consuming the previous one's output (replay scaling)."""
    value = 0
    for _ in range(int(ctx.input["steps"])):
        value = ctx.step.run("step", lambda v=value: v + 1)  # auto-indexed: step, step:1, ...
    return value


STEPS = {"bench-1": 1, "bench-3": 3, "bench-4": 4}


@workflow(name="bench-fanout-child")
def bench_fanout_child(ctx):
    """One step that returns its index and its own run id (the fan-out checks they are distinct)."""
    return ctx.step.run("work", lambda: {"i": ctx.input["i"], "run": str(ctx.run_id)})


@workflow(name="bench-fanout")
def bench_fanout(ctx):
    """Start ``input["count"]`` children at once, then collect every result (the fan-out phase)."""
    children = [
        ctx.step.start_workflow(bench_fanout_child, {"i": i}, name=f"child-{i}") for i in range(ctx.input["count"])
    ]
    return ctx.step.wait_all(children)


# The soak phase (bench/phases/soak.py): one step per run, whose body records itself in the
# worker's ledger (bench/benchapp/soak.py) and sleeps input["ms"]. A share of the runs is
# started as soak-limited: at most SOAK_LIMIT of them per key input["k"] hold a worker at once.
SOAK_LIMIT = 2
SOAK_KEYS = 4


def _soak(ctx):
    from bench.benchapp import soak

    return ctx.step.run("work", lambda: soak.step_body(ctx.run_id, "work", ctx.input))


soak_free = workflow(name="soak")(_soak)
soak_limited = workflow(name="soak-limited", concurrency=Concurrency(SOAK_LIMIT, key=lambda spec: spec["k"]))(_soak)


# A run of the queue bench-fair (bench/phases/fairness.py), its turns taken per tenant when the queue is fair.
bench_tenant = workflow(name="bench-tenant", queue="bench-fair", fairness_key=lambda input: input["t"])(bench_1.fn)


# bench-3 declaring typed attributes, for the attributes phase's filters (its runs are inserted, not worked).
bench_3_attributes = workflow(
    name="bench-3-attributes",
    attributes={"customer_id": int, "region": str, "amount": Decimal},
)(bench_3.fn)


@workflow(name="bench-payload")
def bench_payload(ctx):
    """Three steps, each returning a value the size of the input (bench/phases/payloads.py): five payloads a run."""
    value = ctx.input
    for step in ("s1", "s2", "s3"):
        value = ctx.step.run(step, lambda v=value, s=step: {**v, "seen": s})
    return {"order": value["order"], "steps": 3}
