"""``ctx.publish`` and ``ctx.stream`` on the in-memory backend (engine/progress.py): replayed, written once."""

from __future__ import annotations

import pytest

from django_openworkflow import workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.testing.memory import Clock, InMemoryBackend, drain, start


@workflow(name="memory-progress")
def memory_progress(ctx):
    for phase in range(3):
        ctx.publish("phase", phase)
        ctx.stream("log").write(f"phase {phase}")
        ctx.step.sleep("nap", "1m")  # a new slice each time: the calls before it are replayed
    ctx.publish("phase", "done")
    return "ok"


@pytest.fixture(autouse=True)
def _registered():
    registry.register(memory_progress)
    yield
    registry.unregister(memory_progress.name, memory_progress.version)


def test_replayed_calls_write_nothing_twice_and_values_never_go_back():
    clock = Clock()
    backend = InMemoryBackend(clock=clock)
    run_id = start(backend, memory_progress)
    drain(backend)
    assert backend.published_values(run_id) == {"phase": 0}
    assert backend.read_chunks(run_id, "log") == [(0, "phase 0")]
    for _ in range(3):
        clock.advance("1m")
        drain(backend)
    assert backend.run_outcome(run_id).output == "ok"
    assert backend.published_values(run_id) == {"phase": "done"}
    assert backend.read_chunks(run_id, "log") == [(0, "phase 0"), (1, "phase 1"), (2, "phase 2")]
    assert backend.read_chunks(run_id, "log", 2) == [(2, "phase 2")]
