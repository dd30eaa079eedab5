"""The in-memory backend keeps no approvals: ``ctx.wait_for_approval`` on it fails the run with a clear reason."""

from __future__ import annotations

import pytest

from django_openworkflow import RetryPolicy, workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.testing.memory import InMemoryBackend, drain, start


@pytest.fixture
def asks_approval():
    @workflow(name="memory-approval", retry_policy=RetryPolicy(maximum_attempts=1))
    def spec(ctx):
        return ctx.wait_for_approval("ok", assignees="group:managers")

    yield spec
    registry.unregister(spec.name, spec.version)


def test_wait_for_approval_on_the_memory_backend_says_it_needs_a_database(asks_approval):
    backend = InMemoryBackend()
    run_id = start(backend, asks_approval)
    drain(backend)
    run = backend.get_run(run_id)
    assert run.status == "failed"
    assert run.error["type"] == "NotImplementedError"
    assert "needs a database backend" in run.error["message"]
