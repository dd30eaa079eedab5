"""Workflows of ``tests/test_testing_helpers.py`` (registered when that module imports this one)."""

from __future__ import annotations

import time
from typing import Any

from django_openworkflow import RateLimit, RetryPolicy, workflow

CALLS: list[str] = []
"""What the steps did, in order: tests clear it and read it."""


def record(what: str) -> str:
    CALLS.append(what)
    return what


@workflow(name="testing-greet")
def greet(ctx: Any) -> dict[str, Any]:
    text = ctx.step.run("greet", lambda: record(f"hello {ctx.input['name']}"))
    return {"greeting": text}


@workflow(name="testing-nap")
def nap(ctx: Any) -> str:
    ctx.step.run("before", lambda: record("before"))
    ctx.step.sleep("nap", ctx.input.get("for", "1h"))
    return ctx.step.run("after", lambda: record("after"))


@workflow(name="testing-approval")
def approval(ctx: Any) -> dict[str, Any]:
    decision = ctx.step.wait_for_signal("approve", timeout="1d")
    if decision is None:
        return {"outcome": ctx.step.run("escalate", lambda: record("escalated"))}
    return {"outcome": "approved", "by": decision["by"]}


@workflow(name="testing-event")
def on_payment(ctx: Any) -> Any:
    return ctx.step.wait_for_event("paid", event="payment", match={"order": ctx.input["order"]}, timeout="2h")


_flaky_failures: dict[str, int] = {}


def flaky(key: str) -> str:
    _flaky_failures[key] = _flaky_failures.get(key, 0) + 1
    if _flaky_failures[key] < 3:
        raise TimeoutError(f"attempt {_flaky_failures[key]} of {key} timed out")
    return record(f"{key} ok")


@workflow(name="testing-child")
def child(ctx: Any) -> int:
    ctx.step.sleep("child-nap", "2h")
    return int(ctx.step.run("double", lambda: ctx.input["n"] * 2))


@workflow(name="testing-parent")
def parent(ctx: Any) -> dict[str, Any]:
    # A retry backoff of an hour and a child that sleeps: both skipped.
    value = ctx.step.run(
        "flaky",
        lambda: flaky(ctx.input["key"]),
        retry_policy=RetryPolicy(initial_interval="1h", maximum_interval="1h", maximum_attempts=5),
    )
    doubled = ctx.step.run_workflow(child, {"n": 21})
    return {"flaky": value, "child": doubled}


@workflow(name="testing-starter")
def starter(ctx: Any) -> str:
    """Starts another workflow (not as a child) from inside a step."""
    return str(ctx.step.run("start-greet", lambda: str(greet.run({"name": "from a step"}).id)))


@workflow(name="testing-forever")
def forever(ctx: Any) -> None:
    while True:
        ctx.step.sleep("tick", "1m")


@workflow(name="testing-slow-step")
def slow_step(ctx: Any) -> str:
    """A step longer than the engine's slow-step watchdog waits (0.5 s) before recording its start."""
    return str(ctx.step.run("slow", lambda: (time.sleep(0.8), record("slow done"))[1]))


@workflow(name="testing-rate-limited", rate_limit=RateLimit(1, per="1h"))
def rate_limited(ctx: Any) -> str:
    return str(ctx.step.run("go", lambda: record(f"go {ctx.input}")))
