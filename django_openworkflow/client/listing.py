"""Finding runs from Python: :func:`list_runs` and a run's steps (``RunHandle.steps()``).

The JSON API, the CLI and the admin's search read through the same
:class:`~django_openworkflow.store.queries.RunFilter`, so a filter means
one thing everywhere.
"""

from __future__ import annotations

import base64
import binascii
import uuid
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..definitions.flow import BLOCKED_UNTIL
from ..definitions.payload import check_text
from ..definitions.registry import registry
from ..definitions.retention import expires_at
from ..encryption import refuse_input_search
from ..errors import InvalidArgument, RunNotFound
from ..formatting import numbered
from ..models import StepAttempt, WorkflowRun
from ..store import queries, run_states
from ..store.attributes import run_attributes
from ..store.containment import check_pattern
from ..store.run_states import RunState
from .subjects import as_subject

MAX_PAGE = 500
"""The most runs one page holds."""


@dataclass(frozen=True)
class RunPage:
    """One page of :func:`list_runs`: its runs, newest first, and the cursor of the next page (None: no more)."""

    runs: list[WorkflowRun]
    next_cursor: str | None


@dataclass(frozen=True)
class StepRecord:
    """One step attempt of a run's journal, as ``RunHandle.steps()`` returns it.

    ``kind`` is ``step``, ``sleep``, ``signal``, ``event``, ``child`` ...;
    ``status`` is ``running``, ``completed`` or ``failed``; ``attempt`` counts
    the attempts at that step from 1; ``output`` the
    step's recorded return value, ``error`` its recorded error, if any.
    ``step`` is the step's durable key (``charge``, ``send:1``), as the HTTP
    API and ``workflows show --json`` name it; ``name`` is its deprecated alias.
    """

    id: int
    step: str
    kind: str
    status: str
    attempt: int
    output: Any
    error: dict[str, Any] | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    child_run_id: uuid.UUID | None

    @property
    def name(self) -> str:
        """Deprecated alias of :attr:`step` (the key's name in the HTTP API and the CLI's JSON)."""
        warnings.warn("StepRecord.name is deprecated; use StepRecord.step", DeprecationWarning, stacklevel=2)
        return self.step


def list_runs(
    *,
    status: str | Iterable[str] | None = None,
    workflow: str | None = None,
    queue: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    input_contains: dict[str, Any] | None = None,
    subject: Any = None,
    attributes: dict[str, Any] | None = None,
    attributes_as_text: bool = False,
    limit: int = 50,
    cursor: str | None = None,
    payloads: bool = False,
) -> RunPage:
    """The newest runs that match every filter given, one page at a time.

    ``status`` is one display status or several (``pending``, ``running``,
    ``retrying``, ``waiting``, ``parked``, ``completed``, ``failed``,
    ``canceled``, ``continued``: :class:`~django_openworkflow.states.DisplayStatus`);
    ``created_after`` (inclusive) and ``created_before`` (exclusive) are
    aware datetimes; ``input_contains`` is a JSON object the input must
    contain (``{"customer": 42}``); ``subject`` a saved model instance, or
    its ``"app_label.model:pk"`` text: the runs linked to it.
    ``attributes`` filters on typed attributes, each value of its declared
    type: ``{"region": "eu", "amount__gte": Decimal("10")}`` (lookups
    ``eq``, ``gt``, ``gte``, ``lt``, ``lte``, ``in``); with
    ``attributes_as_text`` the values are text (a query string's) parsed as
    their types, ``in`` comma-separated. Pass the page's ``next_cursor`` as
    ``cursor`` for the next one. ``payloads`` reads each run's input,
    output and error with it (otherwise they load on first access).
    Raises :class:`InvalidArgument` naming a bad filter.
    """
    where = run_filter(
        status=status,
        workflow=workflow,
        queue=queue,
        created_after=created_after,
        created_before=created_before,
        input_contains=input_contains,
        subject=subject,
        attributes=attributes,
        attributes_as_text=attributes_as_text,
    )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument(f"limit must be a whole number from 1 to {MAX_PAGE}, got {limit!r:.40}", "limit")
    after = None if cursor is None else decode_cursor(cursor)
    found = queries.list_runs(where=where, limit=limit + 1, after=after, payloads=payloads)
    more = len(found) > limit
    runs = found[:limit]
    return RunPage(runs, encode_cursor(runs[-1]) if more else None)


def run_filter(
    *,
    status: str | Iterable[str] | None = None,
    workflow: str | None = None,
    queue: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    input_contains: Any = None,
    subject: Any = None,
    attributes: dict[str, Any] | None = None,
    attributes_as_text: bool = False,
) -> queries.RunFilter:
    """The filters checked and put together; :class:`InvalidArgument` naming the first bad one.

    ``attributes_as_text``: the attribute filters' values are text (a query
    string's, the command line's), parsed as their declared types.
    """
    statuses = (status,) if isinstance(status, str) else tuple(status or ())
    for value in statuses:
        if value not in queries.DISPLAY_STATUSES:
            raise InvalidArgument(
                f"unknown status {value!r:.40}; expected one of {', '.join(queries.DISPLAY_STATUSES)}", "status"
            )
    for what, name in (("workflow", workflow), ("queue", queue)):
        if name is not None:
            if not isinstance(name, str) or not 0 < len(name) <= 255:
                raise InvalidArgument(f"{what} must be a name of 1 to 255 characters, got {name!r:.80}", what)
            check_text(name, what)
    for what, moment in (("created_after", created_after), ("created_before", created_before)):
        if moment is not None and not (isinstance(moment, datetime) and timezone.is_aware(moment)):
            raise InvalidArgument(f"{what} must be an aware datetime, got {moment!r:.80}", what)
    if input_contains is not None:
        try:
            check_pattern(input_contains)
        except ValueError as exc:
            raise InvalidArgument(str(exc), "input_contains") from None
        refuse_input_search()  # inputs stored encrypted cannot be searched: the error points to attributes
    linked = None if subject is None else as_subject(subject)
    conditions = registry.attribute_conditions(attributes, workflow, text=attributes_as_text)
    return queries.RunFilter(
        statuses,
        workflow,
        queue,
        created_after,
        created_before,
        input_contains,
        None if linked is None else (linked.type, linked.id),
        conditions,
    )


def attribute_filters(given: Iterable[str], what: str) -> dict[str, str] | None:
    """``["region=eu", "amount__gte=10"]`` (the CLI's ``--attribute``, the API's ``?attribute=``) as a dict of text.

    The values stay text: :func:`run_filter` with ``attributes_as_text``
    parses each as its attribute's declared type.
    """
    filters: dict[str, str] = {}
    for text in given:
        key, equals, value = text.partition("=")
        key = key.strip()
        if not equals or not key:
            raise InvalidArgument(f"{what} {text!r:.80} is not NAME[__LOOKUP]=VALUE, such as region=eu", "attributes")
        if key in filters:
            raise InvalidArgument(f"{what} {key!r:.80} is given twice", "attributes")
        filters[key] = value
    return filters or None


def parse_moment(value: str, what: str) -> datetime:
    """An ISO 8601 date and time from text (a query string's); without an offset it is in UTC."""
    try:
        moment = parse_datetime(value.strip())
    except ValueError:
        moment = None
    if moment is None:
        example = "2026-11-25T09:30:00Z"
        raise InvalidArgument(f"{what} must be an ISO 8601 date and time such as {example}, got {value!r:.80}", what)
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def encode_cursor(run: WorkflowRun) -> str:
    """An opaque cursor: the (created_at, id) the next page starts after."""
    raw = f"{run.created_at.isoformat()}|{run.id.hex}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        moment, run_id = text.split("|")
        created_at = datetime.fromisoformat(moment)
        if timezone.is_naive(created_at):
            raise ValueError("naive")
        return created_at, uuid.UUID(hex=run_id)
    except (TypeError, ValueError, UnicodeDecodeError, binascii.Error):
        raise InvalidArgument(f"cursor {cursor!r:.80} is not a cursor list_runs returned", "cursor") from None


def run_steps(run_id: uuid.UUID) -> list[StepRecord]:
    """A run's step attempts in the order they were written (one query); RunNotFound if there is no such run."""
    attempts = list(StepAttempt.objects.filter(workflow_run_id=run_id).defer("context").order_by("id"))
    if not attempts and not WorkflowRun.objects.filter(id=run_id).exists():
        raise RunNotFound(f"no workflow run with id {run_id}")
    return [
        StepRecord(
            id=attempt.id,
            step=attempt.step_name,
            kind=attempt.kind,
            status=attempt.status,
            attempt=number,
            output=attempt.output,
            error=attempt.error,
            created_at=attempt.created_at,
            started_at=attempt.started_at,
            finished_at=attempt.finished_at,
            child_run_id=attempt.child_workflow_run_id,
        )
        for attempt, number in numbered(attempts)
    ]


# -- the JSON shapes of ``workflows ... --json`` and the HTTP API --


def run_json(
    run: WorkflowRun,
    payloads: bool = True,
    state: RunState | None = None,
    attributes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run as the JSON of ``workflows ... --json`` and the HTTP API: one shape for both.

    ``status`` is the stored status but ``parked`` for a running run no
    worker holds (as it always was); ``display_status`` tells a parked run's
    ``retrying``, ``waiting`` and ``parked`` apart, as the admin and the CLI
    show it. ``state`` is the run's :class:`~.store.run_states.RunState`
    (read here, one query, when not given: a list reads them all at once),
    ``attributes`` its typed attributes (the same: ``attributes_of`` reads a
    page's at once); a ``Decimal`` is written as a string, to stay exact.
    """
    state = state or run_states.state_of(run)
    if attributes is None:
        attributes = run_attributes(run.id)
    data: dict[str, Any] = {
        "id": str(run.id),
        "workflow": run.workflow_name,
        "version": run.version,
        "status": queries.display_status(run.status, run.worker_id),
        "display_status": str(state.status),
        "attempts": run.attempts,
        "worker_id": run.worker_id,
        "idempotency_key": run.idempotency_key,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        # null while the run waits for a concurrency place (blocked_at says since when).
        "available_at": None if run.available_at >= BLOCKED_UNTIL else run.available_at,
        "deadline_at": run.deadline_at,
        "queue": run.queue,
        "priority": run.priority,
        # What it was started with: lower than priority while priority aging has raised it.
        "declared_priority": run.priority if run.declared_priority is None else run.declared_priority,
        "concurrency_key": run.concurrency_key,
        "concurrency_limit": run.concurrency_limit,
        "concurrency_counts_parked": run.concurrency_counts_parked if run.concurrency_key else None,
        "blocked_at": run.blocked_at,
        "rate_key": run.rate_key,
        "rate_limit": run.rate_limit,
        "rate_period": run.rate_period,
        "debounce_key": run.debounce_key,
        "retention_seconds": run.retention.total_seconds() if run.retention is not None else None,
        "expires_at": expires_at(run.finished_at, run.retention),
        # A re-run: the run it re-runs, and the step it started from (null: from the start).
        "rerun_of": str(run.rerun_of_id) if run.rerun_of_id else None,
        "rerun_from_step": run.rerun_from_step,
        # A child run: what its parent's end does to it (null for a run no other run started).
        "parent_close_policy": run.parent_close_policy if run.parent_step_attempt_id else None,
        # What the run is about (client/subjects.py): the object's model and primary key, not the object.
        "subject": {"type": run.subject_type, "id": run.subject_id} if run.subject_type else None,
        # Set once forget() erased its payloads (client/erasure.py): when, and who asked.
        "erased": {"at": run.erased_at, "by": run.erased_by or ""} if run.erased_at else None,
        # Typed attributes (store/attributes.py): an int as a number, a Decimal as a string, a datetime in UTC.
        "attributes": {name: str(value) if isinstance(value, Decimal) else value for name, value in attributes.items()},
    }
    if payloads:
        data.update(input=run.input, output=run.output, error=run.error)
    return data


def attempt_json(attempt: StepAttempt, number: int) -> dict[str, Any]:
    """A step attempt of the journal, ``number`` its attempt at that step (from 1), as JSON."""
    return {
        "id": attempt.id,
        "step": attempt.step_name,
        "kind": attempt.kind,
        "status": attempt.status,
        "attempt": number,
        "started_at": attempt.started_at,
        "finished_at": attempt.finished_at,
        "output": attempt.output,
        "error": attempt.error,
        "context": attempt.context,
        "child_run_id": str(attempt.child_workflow_run_id) if attempt.child_workflow_run_id else None,
        "copied_from": attempt.copied_from,
    }
