"""Run operations — cancel, retry now, retry from the failed step, re-run (from a step) — single and in bulk.

The one front door that the client (``RunHandle.cancel``), the command line
and the admin call, so each operation is written once and refuses the same
way everywhere: :class:`~django_openworkflow.errors.OperationRefused`
carrying the reason, or :class:`~django_openworkflow.errors.RunNotFound`.

The bulk forms work by chunks: one read and one write transaction per
chunk of runs, whatever the number of runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from .. import hooks
from ..definitions.flow import FLOW_COLUMNS
from ..definitions.registry import registry
from ..encryption import MissingFile, is_unreadable
from ..errors import STEP_LIMIT_EXCEEDED, OperationRefused, RunNotFound
from ..models import StepAttempt, WorkflowRun
from ..states import FINISHED_STATUSES, RunStatus
from ..store import get_backend
from ..store.aging import declared_priority_of
from ..store.queries import PAYLOAD_FIELDS, display_status, open_waits
from ..store.reruns import insert_rerun, source_journal
from ..store.run_states import states_of
from .dispatcher import get_dispatcher
from .reruns import copied_attempts, from_step_refusal

CHUNK = 500
"""Runs per read and write in the bulk operations."""


@dataclass
class BulkResult:
    """What a bulk operation did: the runs it changed, and why it left the others alone."""

    changed: list[Any] = field(default_factory=list)
    """Ids of the runs changed (for re-run: the runs started again)."""
    created: list[Any] = field(default_factory=list)
    """For re-run: the ids of the new runs, in the order of ``changed``."""
    refused: dict[Any, str] = field(default_factory=dict)
    """Run id -> the reason it was left alone."""


# -- why an operation cannot apply (one wording for every front door) --

ERASED = "its payloads were erased (forget): there is no input to run it on"


def cancel_refusal(run: WorkflowRun) -> str:
    if run.status in FINISHED_STATUSES:
        return f"it has already finished ({run.status})"
    if run.cancel_requested_at is not None:
        return "it is being canceled already: its compensations are running"
    return ""


def retry_now_refusal(run: WorkflowRun, wait: StepAttempt | None) -> str:
    """Why "retry now" cannot help; empty when it can."""
    if run.status in FINISHED_STATUSES:
        hint = "; retry it from the failed step or re-run it" if run.status == RunStatus.FAILED else ""
        return f"it has finished ({run.status}){hint}"
    if run.worker_id is not None:
        return "a worker is executing it now"
    if wait is not None:
        # Making it due only replays it into the same wait: it needs the signal or event.
        kind = str(wait.kind)
        name = (wait.context or {}).get(kind) or wait.step_name
        return f"it waits for {kind} {str(name)!r}, which retry now cannot deliver (send the {kind} instead)"
    if run.available_at <= timezone.now():
        return "it is due already: a worker will take it at its next poll"
    return ""


def retry_failed_refusal(run: WorkflowRun, shown: str = "") -> str:
    """Why "retry from the failed step" cannot help; empty when it can.

    ``shown``: the run's display status (retrying, waiting...), when known.
    """
    if run.status != RunStatus.FAILED:
        return f"it has not failed (it is {shown or display_status(run.status, run.worker_id)})"
    if run.erased_at is not None:
        return ERASED
    if isinstance(run.error, dict) and run.error.get("type") == STEP_LIMIT_EXCEEDED:
        # A retry keeps the journal, so the run is at the limit again at once.
        return (
            "it failed by reaching OPENWORKFLOW['MAX_STEP_ATTEMPTS']; a retry keeps its journal and would reach "
            "the limit again at once (re-run it with the same input, or raise the limit)"
        )
    return ""


def rerun_refusal(run: WorkflowRun) -> str:
    if run.erased_at is not None:
        return ERASED
    if registry.get(run.workflow_name, run.version) is None:
        return f"this process has no workflow {run.workflow_name!r} version {run.version!r} to start"
    if "input" not in run.get_deferred_fields() and is_unreadable(run.input):
        if run.input.__class__ is MissingFile:
            return f"its input cannot be read: {run.input}"
        return "its input cannot be decrypted with the keys of OPENWORKFLOW['PAYLOAD_ENCRYPTION']"
    return ""


# -- single runs --


def cancel(run_id: Any) -> None:
    """Cancel a pending or running run: a worker executing it stops at its next step and writes nothing more."""
    _single(cancel_many, "cancel", run_id)


def retry_now(run_id: Any) -> None:
    """Make a sleeping, backing-off or scheduled run due now (a sleep ends early)."""
    _single(retry_now_many, "retry_now", run_id)


def retry_from_failed_step(run_id: Any) -> None:
    """Send a failed run back to pending: completed steps keep their outputs, the failed step runs again."""
    _single(retry_from_failed_step_many, "retry_from_failed_step", run_id)


def rerun(run_id: Any) -> Any:
    """Start a new run of the same workflow and version with the same input; returns its id."""
    return _single(rerun_many, "rerun", run_id)


def rerun_from_step(run_id: Any, step: str) -> Any:
    """Start a new run like :func:`rerun` whose steps before ``step`` keep the results recorded in this run.

    The entries of the run's journal recorded before ``step``'s first
    attempt are copied into the new run (each marked with the row it
    copies), so replay returns them without running their code; ``step``
    and everything after it run again. Returns the new run's id. Refused
    with :class:`~django_openworkflow.errors.OperationRefused` where the
    copy could not be replayed faithfully (``client/reruns.py`` says when).
    """
    runs = _read([_as_uuid(run_id)], with_input=True)
    run = next(iter(runs.values()), None)
    if run is None:
        raise RunNotFound(f"no workflow run with id {run_id}")
    journal = source_journal(run.id)
    reason = rerun_refusal(run) or from_step_refusal(journal, step)
    if reason:
        raise OperationRefused("rerun", run.id, reason)
    fields = _rerun_fields(run) | {"rerun_from_step": step}
    new_id = insert_rerun(get_backend(), fields, copied_attempts(journal, step))
    get_dispatcher().run_started(new_id, queue=run.queue)
    return new_id


def _single(bulk: Callable[[Iterable[Any]], BulkResult], operation: str, run_id: Any) -> Any:
    result = bulk([run_id])
    if result.changed:
        return result.created[0] if result.created else result.changed[0]
    reason = next(iter(result.refused.values()), "")
    if reason == _MISSING:
        raise RunNotFound(f"no workflow run with id {run_id}")
    raise OperationRefused(operation, run_id, reason)


# -- in bulk --

_MISSING = "there is no such run"
_CHANGED_MEANWHILE = "it changed meanwhile; look at it again"


def refusals(operation: str, runs: Iterable[WorkflowRun]) -> dict[Any, str]:
    """Why ``operation`` would leave each of ``runs`` alone, by run id (runs it would change are absent).

    For a confirmation page: what the operation would skip, and why.
    """
    return REFUSALS[operation]({run.id: run for run in runs})


def _retry_now_refusals(runs: dict[Any, WorkflowRun]) -> dict[Any, str]:
    waits = open_waits(list(runs))
    return _refusals(runs, lambda run: retry_now_refusal(run, waits.get(run.id)))


def _retry_failed_refusals(runs: dict[Any, WorkflowRun]) -> dict[Any, str]:
    # A run that has not failed is named as the pages name it (retrying, waiting, parked): one query.
    states = states_of([run for run in runs.values() if run.status == RunStatus.RUNNING])
    shown = {run_id: str(state.status) for run_id, state in states.items()}
    return _refusals(runs, lambda run: retry_failed_refusal(run, shown.get(run.id, "")))


REFUSALS: dict[str, Callable[[dict[Any, WorkflowRun]], dict[Any, str]]] = {
    "cancel": lambda runs: _refusals(runs, cancel_refusal),
    "retry_now": _retry_now_refusals,
    "retry_from_failed_step": lambda runs: _retry_failed_refusals(runs),
    "rerun": lambda runs: _refusals(runs, rerun_refusal),
}


def cancel_many(run_ids: Iterable[Any]) -> BulkResult:
    """Cancel the runs that have not finished; each sends the ``run_finished`` hook, status "canceled".

    A run of a workflow declared with ``compensate_on_cancel=True`` that
    has started is not canceled at once: a worker runs its compensations,
    then ends it as canceled (and sends the hook then).
    """
    return _bulk(run_ids, REFUSALS["cancel"], _cancel)


def _cancel(runs: list[WorkflowRun]) -> list[Any]:
    store = get_backend()
    undo = [run for run in runs if run.started_at is not None and _compensates_on_cancel(run)]
    now = [run for run in runs if run not in undo]
    canceled = store.cancel_runs([run.id for run in now]) if now else []
    requested = store.request_cancel([run.id for run in undo]) if undo else []
    for run in now:
        if run.id in canceled:
            hooks.send(
                hooks.run_finished,
                run.workflow_name,
                run_id=run.id,
                status=str(RunStatus.CANCELED),
                error=None,
                queue=run.queue,
            )
    return canceled + requested


def _compensates_on_cancel(run: WorkflowRun) -> bool:
    spec = registry.get(run.workflow_name, run.version)
    return spec is not None and spec.compensate_on_cancel


def retry_now_many(run_ids: Iterable[Any]) -> BulkResult:
    """Make due now the runs that sleep, back off or wait for their scheduled start."""
    return _bulk(run_ids, REFUSALS["retry_now"], lambda runs: get_backend().wake_runs([run.id for run in runs]))


def retry_from_failed_step_many(run_ids: Iterable[Any]) -> BulkResult:
    """Send the failed runs back to pending, each from its failed step."""
    return _bulk(
        run_ids,
        REFUSALS["retry_from_failed_step"],
        lambda runs: get_backend().retry_failed_runs([run.id for run in runs]),
    )


def rerun_many(run_ids: Iterable[Any]) -> BulkResult:
    """Start a new run for each run, with the same workflow, version and input (one insert per chunk)."""
    result = BulkResult()
    dispatcher = get_dispatcher()
    for chunk in _chunks(run_ids):
        runs = _read(chunk, with_input=True)
        refused = {**_missing(chunk, runs), **REFUSALS["rerun"](runs)}
        again = [run for run_id, run in runs.items() if run_id not in refused]
        inserted = get_backend().insert_runs([_rerun_fields(run) for run in again])
        new_ids = [new_id for new_id, _ in inserted]
        for new_id, run in zip(new_ids, again, strict=True):
            dispatcher.run_started(new_id, queue=run.queue)
        result.changed += [run.id for run in again]
        result.created += new_ids
        result.refused.update(refused)
    return result


def _rerun_fields(run: WorkflowRun) -> dict[str, Any]:
    """A re-run's columns: the run's workflow, version, input, flow columns and subject, and the link to it."""
    fields = {"workflow_name": run.workflow_name, "version": run.version, "input": run.input, "rerun_of_id": run.id}
    fields |= {"subject_type": run.subject_type, "subject_id": run.subject_id}
    fields |= {name: getattr(run, name) for name in FLOW_COLUMNS}
    # The priority it was started with, not what priority aging raised it to while it waited.
    return fields | {"priority": declared_priority_of(run.priority, run.declared_priority)}


def _bulk(
    run_ids: Iterable[Any],
    refusals: Callable[[dict[Any, WorkflowRun]], dict[Any, str]],
    apply: Callable[[list[WorkflowRun]], list[Any]],
) -> BulkResult:
    """Per chunk: read the runs (one query), refuse what cannot change, apply to the rest (one transaction)."""
    result = BulkResult()
    for chunk in _chunks(run_ids):
        runs = _read(chunk)
        refused = {**_missing(chunk, runs), **refusals(runs)}
        eligible = [run_id for run_id in runs if run_id not in refused]
        changed = apply([runs[run_id] for run_id in eligible]) if eligible else []
        result.changed += changed
        result.refused.update(refused)
        # The store's own conditions decide: a run that changed since the read is left alone.
        result.refused.update({run_id: _CHANGED_MEANWHILE for run_id in set(eligible) - set(changed)})
    return result


def _chunks(run_ids: Iterable[Any]) -> Iterable[list[Any]]:
    ids = list(dict.fromkeys(_as_uuid(run_id) for run_id in run_ids))
    for start in range(0, len(ids), CHUNK):
        yield ids[start : start + CHUNK]


def _as_uuid(run_id: Any) -> Any:
    try:
        return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        return run_id  # reported as missing


def _read(chunk: list[Any], with_input: bool = False) -> dict[Any, WorkflowRun]:
    ids = [run_id for run_id in chunk if isinstance(run_id, uuid.UUID)]
    deferred = [name for name in PAYLOAD_FIELDS if not (with_input and name == "input")]
    deferred.remove("error")  # refusals read it
    return WorkflowRun.objects.defer(*deferred).in_bulk(ids)


def _missing(chunk: list[Any], runs: dict[Any, WorkflowRun]) -> dict[Any, str]:
    return {run_id: _MISSING for run_id in chunk if run_id not in runs}


def _refusals(runs: dict[Any, WorkflowRun], reason: Callable[[WorkflowRun], str]) -> dict[Any, str]:
    return {run_id: why for run_id, run in runs.items() if (why := reason(run))}
