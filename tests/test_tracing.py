"""OpenTelemetry traces: a run continues the trace that started it, on the worker, slice after slice."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from django_openworkflow import send_signal, tracing
from django_openworkflow.checks import check_telemetry
from django_openworkflow.models import WorkflowRun
from tests.fixtures.telemetry_workflows import telemetry_async, telemetry_child, telemetry_fails, telemetry_steps

pytestmark = pytest.mark.django_db(transaction=True)

EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracer_provider() -> None:
    """The SDK with an in-memory exporter, as an app would set up its own exporter (set once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)


@pytest.fixture
def tracing_on() -> Iterator[None]:
    EXPORTER.clear()
    with override_settings(OPENWORKFLOW={"POLL_INTERVAL": "20ms", "TRACING": True}):
        tracing.enable()
        try:
            yield
        finally:
            tracing.disable()


def finished(*handles: Any) -> bool:
    """Every run has ended (a burst worker could stop while a step's retry is not due yet)."""
    return all(handle.status() in ("completed", "failed") for handle in handles)


def spans(name: str, **attributes: Any) -> list[ReadableSpan]:
    found = [span for span in EXPORTER.get_finished_spans() if span.name == name]
    return [span for span in found if all(span.attributes.get(k) == v for k, v in attributes.items())]


def test_a_run_started_in_a_traced_view_continues_that_trace_on_the_worker(client, tracing_on, run_worker):
    tracer = trace.get_tracer("tests")
    with (
        override_settings(ROOT_URLCONF="tests.fixtures.telemetry_urls"),
        tracer.start_as_current_span("POST /start") as view,
    ):
        run_id = client.post("/start").json()["id"]
    request = view.get_span_context()
    stored = WorkflowRun.objects.get(id=run_id).trace_context
    assert stored["traceparent"].split("-")[1:3] == [f"{request.trace_id:032x}", f"{request.span_id:016x}"]

    # First slice: parks on the wait. Then a signal from another traced request, and the second slice.
    run_worker(until=lambda: WorkflowRun.objects.get(id=run_id).is_parked, queues=("telemetry",))
    with tracer.start_as_current_span("POST /approve") as sender:
        assert send_signal(run_id, "go", "yes") is True
    run_worker(until=lambda: WorkflowRun.objects.get(id=run_id).status == "completed", queues=("telemetry",))

    slices = spans("workflow.run", **{"workflow.run_id": run_id})
    assert len(slices) >= 3  # the wait, the child's start (parks on it), the end
    for span in slices:
        assert span.context.trace_id == request.trace_id
        assert span.parent is not None and span.parent.span_id == request.span_id
        assert span.attributes["workflow.name"] == "telemetry-parent"
        assert span.kind == trace.SpanKind.CONSUMER
    assert [span.attributes["workflow.first_slice"] for span in slices].count(True) == 1

    # The child run continues the trace under the parent's slice that started it.
    child_id = str(WorkflowRun.objects.get(continued_from=None, workflow_name=telemetry_child.name).id)
    (child_slice,) = spans("workflow.run", **{"workflow.run_id": child_id})
    assert child_slice.context.trace_id == request.trace_id
    assert child_slice.parent.span_id in {span.context.span_id for span in slices}
    (step,) = spans("workflow.step", **{"workflow.run_id": child_id})
    assert step.parent.span_id == child_slice.context.span_id
    assert dict(step.attributes) == {
        "workflow.name": "telemetry-child",
        "workflow.run_id": child_id,
        "workflow.step.name": "child-step",
        "workflow.step.kind": "run",
        "workflow.step.attempt": 1,
        "workflow.step.status": "completed",
    }
    assert step.start_time <= step.end_time

    (signal,) = spans("workflow.signal")
    assert signal.context.trace_id == sender.get_span_context().trace_id
    assert signal.parent.span_id == sender.get_span_context().span_id
    assert signal.attributes["workflow.name"] == "telemetry-parent"
    assert signal.attributes["workflow.run_id"] == run_id
    assert signal.attributes["workflow.signal.name"] == "go"
    assert signal.attributes["workflow.signal.delivered"] is True


def test_step_spans_carry_their_attempt_and_a_failure_is_an_error(tracing_on, run_worker):
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("enqueue"):
        steps, fails = telemetry_steps.run(), telemetry_fails.run()
    run_worker(until=lambda: finished(steps, fails), queues=("telemetry",))
    flaky = sorted(
        spans("workflow.step", **{"workflow.run_id": str(steps.id), "workflow.step.name": "flaky"}),
        key=lambda span: span.attributes["workflow.step.attempt"],
    )
    assert [span.attributes["workflow.step.attempt"] for span in flaky] == [1, 2]
    assert [span.status.status_code for span in flaky] == [StatusCode.ERROR, StatusCode.UNSET]
    assert "first attempt fails" in flaky[0].status.description
    # The two "send" steps keep their durable keys.
    names = {
        span.attributes["workflow.step.name"] for span in spans("workflow.step", **{"workflow.run_id": str(steps.id)})
    }
    assert names == {"send", "send:1", "flaky"}

    (failed_slice,) = spans("workflow.run", **{"workflow.run_id": str(fails.id)})
    assert failed_slice.status.status_code == StatusCode.ERROR
    assert failed_slice.attributes["workflow.outcome"] == "failed"
    (boom,) = spans("workflow.step", **{"workflow.run_id": str(fails.id)})
    assert boom.status.status_code == StatusCode.ERROR
    assert boom.parent.span_id == failed_slice.context.span_id


def test_an_async_workflow_is_traced_like_a_sync_one(tracing_on, run_worker):
    with trace.get_tracer("tests").start_as_current_span("enqueue") as enqueue:
        handle = telemetry_async.run()
    run_worker(until=lambda: finished(handle), queues=("telemetry",))
    assert handle.result(timeout=0) == [1, "child"]
    trace_id = enqueue.get_span_context().trace_id
    slices = spans("workflow.run", **{"workflow.run_id": str(handle.id)})
    assert slices and all(span.context.trace_id == trace_id for span in slices)
    (fetch,) = spans("workflow.step", **{"workflow.run_id": str(handle.id), "workflow.step.name": "fetch"})
    assert fetch.parent.span_id in {span.context.span_id for span in slices}
    child_id = str(WorkflowRun.objects.get(workflow_name=telemetry_child.name).id)
    (child_slice,) = spans("workflow.run", **{"workflow.run_id": child_id})
    assert child_slice.context.trace_id == trace_id
    assert child_slice.parent.span_id in {span.context.span_id for span in slices}


def test_bulk_starts_carry_the_trace_too(tracing_on):
    with trace.get_tracer("tests").start_as_current_span("bulk") as bulk:
        handles = telemetry_steps.run_many([{}, {}])
    trace_id = f"{bulk.get_span_context().trace_id:032x}"
    for handle in handles:
        assert handle.fetch().trace_context["traceparent"].split("-")[1] == trace_id


def test_a_run_started_outside_any_span_has_no_trace_context_and_starts_its_own_trace(tracing_on, run_worker):
    handle = telemetry_steps.run()
    assert handle.fetch().trace_context is None
    run_worker(until=lambda: finished(handle), queues=("telemetry",))
    (root,) = spans("workflow.run", **{"workflow.run_id": str(handle.id)})[:1]
    assert root.parent is None


def test_tracing_off_stores_no_context_and_makes_no_spans(run_worker):
    EXPORTER.clear()
    with trace.get_tracer("tests").start_as_current_span("request"):
        handle = telemetry_steps.run()
    assert handle.fetch().trace_context is None
    run_worker(until=lambda: finished(handle), queues=("telemetry",))
    assert handle.status() == "completed"
    assert [span.name for span in EXPORTER.get_finished_spans()] == ["request"]  # the test's own, nothing else


def test_tracing_on_without_opentelemetry_is_a_check_error(monkeypatch):
    for module in ("opentelemetry", "opentelemetry.trace"):  # what imports see with it uninstalled
        monkeypatch.setitem(sys.modules, module, None)
    with override_settings(OPENWORKFLOW={"TRACING": True}):
        assert [m.id for m in check_telemetry()] == ["openworkflow.E071"]
