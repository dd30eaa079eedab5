"""Erasing a finished run's payloads, keeping the shape of its journal (``forget``'s SQL).

What goes: the run's input and output; every step's result; the message and
traceback of every error (the run's, its steps', a failed child's as its
parent recorded it); the data of its signals; its published values and
stream chunks; the details, comments and sign-offs' comments of its
approvals and the initial data of its tasks; the match patterns of its
waits for events; and the payload of every event delivered
to it, or that started it, in the event table (the other runs an event
reached keep their own copy, in their journals).

What stays: every row, with its statuses, kinds, step keys, times, attempt
counts, error types and keys (idempotency, concurrency ...), the run's
subject and typed attributes: the run list, the dashboard and the metrics
count and show the run as before. ``erased_at`` and ``erased_by`` say when
and by whom.

Each run is erased in one transaction that locks its row first and erases
only a run that is finished then: a run a worker holds, or one made due
again meanwhile, is left whole. The files of its offloaded payloads
(``offload.py``), and the files uploaded to its human tasks' forms
(``task_files.py``), are deleted once that transaction commits.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import encryption
from ..models import Approval, Event, PublishedValue, Signal, StepAttempt, StreamChunk, WorkflowRun
from ..states import FINISHED_STATUSES, StepKind
from . import payload_files
from .records import EVENT_RUN_KEY_PREFIX

if TYPE_CHECKING:
    from .backends.base import Backend

ERASED_TEXT = "<erased>"
"""What an erased error's message and traceback read."""


class Outcome(enum.Enum):
    """What :func:`erase_run` found."""

    ERASED = "erased"
    ALREADY = "already erased"
    LIVE = "not finished"
    GONE = "deleted"


def with_descendants(run_ids: Iterable[Any]) -> list[Any]:
    """``run_ids`` and the ids of their child runs, their children's, and so on (one query per generation)."""
    found = dict.fromkeys(run_ids)  # ordered, and a set for "seen"
    generation = list(found)
    while generation:
        children = WorkflowRun.objects.filter(parent_step_attempt__workflow_run_id__in=generation)
        generation = [run_id for run_id in children.values_list("id", flat=True) if run_id not in found]
        found.update(dict.fromkeys(generation))
    return list(found)


def erased_error(error: Any) -> Any:
    """An error dict with its texts (and its child error's) replaced by :data:`ERASED_TEXT`; the rest kept."""
    if not isinstance(error, dict):
        return None if error is None else ERASED_TEXT
    kept = {key: ERASED_TEXT if key in encryption.ERROR_TEXT_KEYS else value for key, value in error.items()}
    for key in encryption.NESTED_ERROR_KEYS:
        if key in kept:
            kept[key] = erased_error(kept[key])
    return kept


def erase_run(backend: Backend, run_id: Any, by: str) -> Outcome:
    """Erase one finished run's payloads in one transaction; see the module's docstring."""

    def erase() -> Outcome:
        with backend.write_lock(), transaction.atomic(using=backend.alias):
            run = (
                WorkflowRun.objects.select_for_update()
                .filter(id=run_id)
                .only("id", "status", "erased_at", "idempotency_key", "error")
                .first()
            )
            if run is None:
                return Outcome.GONE
            if run.status not in FINISHED_STATUSES:
                return Outcome.LIVE
            if run.erased_at is not None:
                return Outcome.ALREADY
            events = _delivered_events(run_id)  # before the journal's results are erased
            files = payload_files.references_of_runs([run_id])  # before the columns are cleared
            _erase_journal(run_id)
            if run.idempotency_key and run.idempotency_key.startswith(EVENT_RUN_KEY_PREFIX):
                started_by = run.idempotency_key.removeprefix(EVENT_RUN_KEY_PREFIX)
                events += [int(started_by)] if started_by.isdigit() else []
            if events:
                files += payload_files.references(Event.objects.filter(id__in=events), "payload")
                Event.objects.filter(id__in=events).update(payload=None)
            payload_files.delete_on_commit(files, backend.alias)
            payload_files.delete_task_files_on_commit([run_id], backend.alias)  # what its tasks' forms uploaded
            Signal.objects.filter(workflow_run_id=run_id).update(data=None)
            PublishedValue.objects.filter(workflow_run_id=run_id).update(value=None)
            StreamChunk.objects.filter(workflow_run_id=run_id).update(data=None)
            _erase_approvals(run_id)
            WorkflowRun.objects.filter(id=run_id).update(
                input=None, output=None, error=erased_error(run.error), erased_at=backend.now(), erased_by=by
            )
            return Outcome.ERASED

    return backend.retrying(erase)


def _erase_approvals(run_id: Any) -> None:
    """Approvals' and tasks' texts go; who signed off, and when, stays (a sign-off's comment is erased)."""
    approvals = Approval.objects.filter(workflow_run_id=run_id)
    for approval in approvals.exclude(required=1).only("id", "signoffs"):
        kept = approval.signoffs if isinstance(approval.signoffs, list) else []  # an undecryptable list: all goes
        approvals.filter(id=approval.id).update(signoffs=[{**signoff, "comment": ""} for signoff in kept])
    approvals.update(details="", comment="", initial=None)


def _delivered_events(run_id: Any) -> list[int]:
    """The ids of the events delivered to the run's waits (their results name them)."""
    outputs = StepAttempt.objects.filter(workflow_run_id=run_id, kind=StepKind.EVENT, output__isnull=False)
    ids = []
    for output in outputs.values_list("output", flat=True):
        event_id = output.get("event_id") if isinstance(output, dict) else None
        if isinstance(event_id, int):
            ids.append(event_id)
    return ids


def _erase_journal(run_id: Any) -> None:
    """Erase the step results, the errors' texts and the event patterns of one run's journal, keeping its rows."""
    attempts = StepAttempt.objects.filter(workflow_run_id=run_id)
    for attempt_id, error in attempts.filter(error__isnull=False).values_list("id", "error"):
        StepAttempt.objects.filter(id=attempt_id).update(error=erased_error(error))
    for attempt_id, context in attempts.filter(kind=StepKind.EVENT).values_list("id", "context"):
        if isinstance(context, dict) and "match" in context:
            StepAttempt.objects.filter(id=attempt_id).update(context={**context, "match": None})
    attempts.update(output=None)
