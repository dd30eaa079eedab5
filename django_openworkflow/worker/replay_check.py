"""``check_replay``: the runs in flight, replayed against the code of this process before a deploy."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, OuterRef

from ..engine.replay_check import ReplayFinding, check_run
from ..models import StepAttempt, WorkflowRun
from ..states import RunStatus
from ..store import get_backend
from ..store.queue import RUN_RECORD_FIELDS
from ..store.records import RunRecord

BATCH = 200
"""Runs read per query."""


def check_replay(
    *, workflows: Iterable[str] = (), sample: int | None = None, run_ids: Iterable[Any] | None = None
) -> list[ReplayFinding]:
    """Replay the journal of each run in flight against the workflows registered here; one finding per run.

    Runs in flight are pending or running ones with a journal (a run not
    started yet has nothing to disagree with). ``workflows`` limits the check
    to those names; ``sample`` to the ``sample`` most recently started runs
    of each workflow and version; ``run_ids`` to those runs. No step's code
    runs and nothing is written: replay stops before the first step the
    journal does not hold.
    """
    store = get_backend()
    runs = WorkflowRun.objects.filter(
        Exists(StepAttempt.objects.filter(workflow_run=OuterRef("pk"))),
        status__in=[RunStatus.PENDING, RunStatus.RUNNING],
    )
    names = list(workflows)
    if names:
        runs = runs.filter(workflow_name__in=names)
    if run_ids is not None:
        runs = runs.filter(id__in=list(run_ids))
    ids = list(
        runs.order_by("workflow_name", "version", "-started_at", "id").values_list("id", "workflow_name", "version")
    )
    if sample is not None:
        kept: dict[tuple[str, str | None], int] = {}
        chosen = []
        for run_id, name, version in ids:
            if kept.get((name, version), 0) < sample:
                kept[(name, version)] = kept.get((name, version), 0) + 1
                chosen.append((run_id, name, version))
        ids = chosen
    findings = []
    now = store.now()
    for start in range(0, len(ids), BATCH):
        chunk = [run_id for run_id, _, _ in ids[start : start + BATCH]]
        records = {
            row[0]: RunRecord(*row) for row in WorkflowRun.objects.filter(id__in=chunk).values_list(*RUN_RECORD_FIELDS)
        }
        findings += [check_run(store, records[run_id], now) for run_id in chunk if run_id in records]
    return findings
