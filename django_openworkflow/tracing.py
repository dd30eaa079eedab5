"""OpenTelemetry traces (opentelemetry-api, the ``otel`` extra), on with ``OPENWORKFLOW["TRACING"] = True``.

Three spans, named as the design notes name them:

``workflow.run``
    One per slice a worker executes (a run that sleeps and resumes in
    another process gets one span per slice), a child of the span that was
    current where the run was started: the W3C trace context
    (``traceparent``, ``tracestate``) is stored on the run's row
    (``WorkflowRun.trace_context``) when it is inserted, and the worker
    continues that trace.
``workflow.step``
    One per attempt of a ``ctx.step.run`` step, a child of its slice's span,
    with the attempt number; its status is an error when the step's code
    raised.
``workflow.signal``
    One per :func:`~django_openworkflow.client.handle.send_signal`, in the
    sender's trace.

Nothing here imports OpenTelemetry until :func:`enable` runs (the app's
``ready()`` calls it when the setting is on): with tracing off, starting a
run costs one test of a module flag and its ``trace_context`` stays NULL.
The spans go to whatever tracer provider the process sets up (the SDK and
an exporter, see docs/operations-telemetry.md): the package only uses the API.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from . import hooks


class TracedRun(Protocol):
    """What a slice's span reads of its run (the store's ``RunRecord`` is one): tracing sits below the store."""

    @property
    def id(self) -> Any: ...
    @property
    def workflow_name(self) -> str: ...
    @property
    def version(self) -> str | None: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def trace_context(self) -> dict[str, str] | None: ...


INSTRUMENTATION_NAME = "django_openworkflow"
OTEL_EXTRA = "pip install 'django-openworkflow[otel]'"

_enabled = False
_tracer: Any = None
# The open ``workflow.run`` span of each run a slice executes in this process, by run id: step spans
# are its children whatever thread (a step with a timeout, a parallel step) reports them.
_slice_spans: dict[Any, Any] = {}
_lock = threading.Lock()


def available() -> bool:
    """Whether opentelemetry-api is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except (ImportError, ValueError):  # no opentelemetry package at all, or a blocked one
        return False


def is_enabled() -> bool:
    return _enabled


def enable() -> None:
    """Start tracing in this process: runs carry their starter's trace, workers make spans.

    Raises ``ImportError`` naming the extra when opentelemetry-api is missing.
    """
    global _enabled, _tracer
    with _lock:
        if _enabled:
            return
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(f"OPENWORKFLOW['TRACING'] needs opentelemetry-api: {OTEL_EXTRA}") from exc
        _tracer = trace.get_tracer(INSTRUMENTATION_NAME)
        hooks.step_finished.connect(_on_step_finished, dispatch_uid="django_openworkflow.tracing.step")
        hooks.signal_sent.connect(_on_signal_sent, dispatch_uid="django_openworkflow.tracing.signal")
        _enabled = True


def disable() -> None:
    """Stop tracing in this process (tests)."""
    global _enabled, _tracer
    with _lock:
        hooks.step_finished.disconnect(dispatch_uid="django_openworkflow.tracing.step")
        hooks.signal_sent.disconnect(dispatch_uid="django_openworkflow.tracing.signal")
        _enabled, _tracer = False, None
        _slice_spans.clear()


def current_context() -> dict[str, str] | None:
    """The W3C trace context of the current span, to store on a run being inserted; None when there is none.

    With tracing off this is the test of one flag.
    """
    if not _enabled:
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None


class _Untraced:
    """What :func:`slice_span` yields with tracing off: takes the slice's result and does nothing."""

    def finish(self, outcome: str, detail: str) -> None:
        pass


_UNTRACED = _Untraced()


class _TracedSlice:
    def __init__(self, span: Any) -> None:
        self.span = span

    def finish(self, outcome: str, detail: str) -> None:
        """The slice ended with ``outcome`` (the engine's ``Outcome``): an error status if it failed the run."""
        from opentelemetry.trace import Status, StatusCode

        self.span.set_attribute("workflow.outcome", outcome)
        if outcome in ("failed", "released"):
            self.span.set_status(Status(StatusCode.ERROR, detail[:500] or outcome))


@contextmanager
def slice_span(run: TracedRun, fresh: bool = False) -> Iterator[_Untraced | _TracedSlice]:
    """Around one slice of ``run`` on a worker: a ``workflow.run`` span, current while the slice runs.

    Its parent is the trace context stored on the run (the code that
    started it); runs started by the slice (children, a successor) carry
    this span's context in turn.
    """
    if not _enabled:
        yield _UNTRACED
        return
    from opentelemetry import propagate, trace

    parent = propagate.extract(run.trace_context) if run.trace_context else None
    attributes = {
        "workflow.name": run.workflow_name,
        "workflow.version": run.version or "",
        "workflow.run_id": str(run.id),
        "workflow.queue": run.queue,
        "workflow.run_attempt": run.attempts,
        "workflow.first_slice": fresh,
    }
    with _tracer.start_as_current_span(
        "workflow.run", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ) as span:
        _slice_spans[run.id] = span
        try:
            yield _TracedSlice(span)
        finally:
            _slice_spans.pop(run.id, None)


def _on_step_finished(
    sender: str, *, run_id: Any, step: str, status: str, seconds: float, attempt: int = 1, **kwargs: Any
) -> None:
    """A ``workflow.step`` span for the attempt that just ended, timed from its duration, under its slice's span."""
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    parent = _slice_spans.get(run_id)
    context = trace.set_span_in_context(parent) if parent is not None else None
    end = time.time_ns()
    span = _tracer.start_span(
        "workflow.step",
        context=context,
        start_time=end - max(int(seconds * 1e9), 0),
        attributes={
            "workflow.name": sender,
            "workflow.run_id": str(run_id),
            "workflow.step.name": step,
            "workflow.step.kind": "run",
            "workflow.step.attempt": attempt,
            "workflow.step.status": status,
        },
    )
    error = kwargs.get("error")
    if status != "completed":
        message = (error or {}).get("message") or status
        span.set_status(Status(StatusCode.ERROR, f"{(error or {}).get('type', 'Error')}: {message}"[:500]))
    span.end(end_time=end)


def _on_signal_sent(
    sender: str, *, run_id: Any, signal_name: str, delivered: bool, seconds: float, **kwargs: Any
) -> None:
    """A ``workflow.signal`` span for a send that just returned, in the sender's current trace."""
    end = time.time_ns()
    span = _tracer.start_span(
        "workflow.signal",
        start_time=end - max(int(seconds * 1e9), 0),
        attributes={
            "workflow.name": sender,
            "workflow.run_id": str(run_id),
            "workflow.signal.name": signal_name,
            "workflow.signal.delivered": delivered,
        },
    )
    span.end(end_time=end)
