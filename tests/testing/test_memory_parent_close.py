"""The in-memory backend applies the parent-close policy as the database backends do."""

from __future__ import annotations

import pytest

from django_openworkflow import workflow
from django_openworkflow.testing.memory import InMemoryBackend, drain, start

undone: list[str] = []  # the compensations that ran; the test's thread only (drain runs slices on it)


@workflow(name="mem-close-child")
def mem_close_child(ctx):
    ctx.step.run("work", lambda: None, compensate=lambda _: undone.append(ctx.input["who"]))
    return ctx.step.wait_for_signal("go")


@workflow(name="mem-close-parent")
def mem_close_parent(ctx):
    for policy in ("terminate", "request_cancel", "abandon"):
        ctx.step.start_workflow(mem_close_child, {"who": policy}, name=policy, parent_close_policy=policy)
    return ctx.step.wait_for_signal("end")


@pytest.mark.parametrize("end", ["complete", "cancel"])
def test_the_parents_end_closes_its_children_by_their_policy(end):
    undone.clear()
    backend = InMemoryBackend()
    parent_id = start(backend, mem_close_parent)
    drain(backend)
    if end == "cancel":
        backend.cancel_run(parent_id)
    else:
        backend.send_signal(parent_id, "end", "ok", None)
    drain(backend)
    kids = {
        backend.attempts[backend.runs[kid].parent_step_attempt_id].step_name: kid
        for kid in backend.child_run_ids(parent_id)
    }
    status = {name: backend.run_status(kid) for name, kid in kids.items()}
    assert status == {"terminate": "canceled", "request_cancel": "canceled", "abandon": "running"}
    assert undone == ["request_cancel"]
