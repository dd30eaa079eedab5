"""The display statuses as filters, and what a page of runs needs to show them (one query).

:class:`~django_openworkflow.states.DisplayStatus` names what a run is
doing; :func:`~django_openworkflow.states.display_state` decides it for one
row. The filters here decide it in SQL with the same rules, so a count, a
filter and a badge always agree:

- ``retrying``: parked (running, no worker) with a note in ``error``: the
  engine parks a run with the failure it backs off after, and drops the note
  when the run executes again;
- ``waiting``: parked, no note, with an open signal, event or child wait;
- ``parked``: any other parked run (sleeping, or waiting for a concurrency place).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import BooleanField, Exists, ExpressionWrapper, OuterRef, Q, QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Left

from ..encryption import open_text_value, reading_keyring
from ..models import IS_HELD, IS_PARKED, StepAttempt, WorkflowRun
from ..states import WAITING_KINDS, DisplayStatus, RunStatus, StepStatus, display_state
from . import get_backend

DISPLAY_STATUSES: tuple[str, ...] = tuple(DisplayStatus.values())
"""Every status the admin and the CLI show and filter by, in life-cycle order; each run is in exactly one."""

HAS_NOTE = Q(error__isnull=False)

TAKEN_BACK = Exists(
    StepAttempt.objects.filter(workflow_run_id=OuterRef("pk"), status=StepStatus.FAILED, error__type="LeaseExpired")
)
"""A worker lost the run's lease mid-step and another took the run back (the step was charged ``LeaseExpired``)."""


def _open_wait() -> Exists:
    """An open signal, event or child wait of the outer run."""
    return Exists(
        StepAttempt.objects.filter(workflow_run_id=OuterRef("pk"), status=StepStatus.RUNNING, kind__in=WAITING_KINDS)
    )


def status_q(status: str) -> Q:
    """The filter for one display status."""
    if status == DisplayStatus.RETRYING:
        return IS_PARKED & HAS_NOTE
    if status == DisplayStatus.WAITING:
        return IS_PARKED & ~HAS_NOTE & Q(_open_wait())
    if status == DisplayStatus.PARKED:
        return IS_PARKED & ~HAS_NOTE & ~Q(_open_wait())
    if status == DisplayStatus.RUNNING:
        return IS_HELD
    if status in RunStatus.values():
        return Q(status=status)
    raise ValueError(f"unknown status {status!r}; expected one of {', '.join(DISPLAY_STATUSES)}")


def parking_waits(run_ids: list[Any]) -> dict[Any, StepAttempt]:
    """The latest open signal, event or child wait of each of ``run_ids`` that has one, by run id (one query)."""
    waits = StepAttempt.objects.filter(
        workflow_run_id__in=run_ids, kind__in=WAITING_KINDS, status=StepStatus.RUNNING
    ).defer("output", "error")
    return {wait.workflow_run_id: wait for wait in waits.order_by("id")}


MESSAGE_CHARS = 300
"""How much of an error's message a list reads (the run page shows all of it)."""

_NOTE_KEYS = {
    "type": "type",
    "message": "message",
    "step": "step",
    "child_type": "child_error__type",
    "child_message": "child_error__message",
    "child_step": "child_error__step",
    "retry_scope": "retry__scope",
    "retry_failures": "retry__failures",
    "retry_max": "retry__max_attempts",
}


def with_error_summary(queryset: QuerySet[WorkflowRun]) -> QuerySet[WorkflowRun]:
    """``queryset`` with the few keys of ``error`` a list shows annotated (``owf_error_type`` ...).

    A list defers the payloads (``error`` holds a traceback); these keys are
    what the status and error columns need. :func:`error_summary` reads them back.
    Also ``owf_taken_back`` (:data:`TAKEN_BACK`), which the status column marks.
    """
    backend = get_backend()
    columns: dict[str, Any] = {f"owf_error_{name}": KT(f"error__{path}") for name, path in _NOTE_KEYS.items()}
    if reading_keyring() is None:
        # A sealed message (encryption.py) is read whole, opened, then cut (error_summary): a cut one opens nothing.
        for name in ("message", "child_message"):
            columns[f"owf_error_{name}"] = Left(KT(f"error__{_NOTE_KEYS[name]}"), MESSAGE_CHARS)
    columns = {name: backend.json_key_text(column) for name, column in columns.items()}
    columns["owf_has_note"] = ExpressionWrapper(HAS_NOTE, output_field=BooleanField())
    columns["owf_taken_back"] = TAKEN_BACK
    return queryset.annotate(**columns)


def _text(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def error_summary(run: WorkflowRun) -> dict[str, Any] | None:
    """The run's error as a list shows it, or None: type, message, step, ``child_error`` and ``retry`` keys.

    Read from ``run.error`` when it is loaded, else from the annotations of :func:`with_error_summary`.
    """
    if "error" not in run.get_deferred_fields() or not hasattr(run, "owf_has_note"):
        # Loaded, or deferred without the summary's annotations: then reading it costs a query.
        return run.error if isinstance(run.error, dict) or run.error is None else {"message": str(run.error)}
    values = {name: _text(getattr(run, f"owf_error_{name}", None)) for name in _NOTE_KEYS}
    for name in ("message", "child_message"):
        text = open_text_value(values[name])
        values[name] = text[:MESSAGE_CHARS] if text.__class__ is str else text
    if not any(values.values()):
        # A note with none of these keys is still a note: a deferred error is read only to say so.
        return {} if getattr(run, "owf_has_note", False) else None
    summary: dict[str, Any] = {k: values[k] for k in ("type", "message", "step") if values[k] is not None}
    if values["child_type"] or values["child_message"]:
        child = {"type": values["child_type"], "message": values["child_message"], "step": values["child_step"]}
        summary["child_error"] = {key: value for key, value in child.items() if value is not None}
    if values["retry_scope"] is not None or values["retry_failures"] is not None:
        summary["retry"] = {
            "scope": values["retry_scope"],
            "failures": _int(values["retry_failures"]),
            "max_attempts": _int(values["retry_max"]),
        }
    return summary


@dataclass(frozen=True)
class RunState:
    """What a run is doing, for a page or a JSON object: its display status and what it depends on.

    Not :class:`~django_openworkflow.store.records.DispatchState`, what a
    dispatcher reads to send a run's next slice.
    """

    status: DisplayStatus
    error: dict[str, Any] | None = None  # the error or the retry note (see error_summary)
    wait: StepAttempt | None = field(default=None, compare=False)  # the open wait of a waiting run
    taken_back: bool = False  # see TAKEN_BACK; known only for runs read with with_error_summary


def states_of(runs: list[WorkflowRun]) -> dict[Any, RunState]:
    """The state of each of ``runs`` by id, reading their open waits (one query; none for no runs)."""
    # Read for every run of the page, not only the parked ones: a page costs the same queries whatever it shows.
    waits = parking_waits([run.id for run in runs])
    states = {}
    for run in runs:
        error = error_summary(run)
        wait = waits.get(run.id)
        status = display_state(run.status, run.worker_id, has_note=error is not None, waiting=wait is not None)
        waiting_on = wait if status == DisplayStatus.WAITING else None
        states[run.id] = RunState(status, error, waiting_on, bool(getattr(run, "owf_taken_back", False)))
    return states


def state_of(run: WorkflowRun) -> RunState:
    """The state of one run (one query)."""
    return states_of([run])[run.id]
