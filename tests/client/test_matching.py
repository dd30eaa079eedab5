"""Operations on every run a filter matches (client/matching.py): the preview and the chunked walk."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from django_openworkflow.client import matching, operations
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import queries
from tests.admin.helpers import make_attempt, make_run, one_of_each, waiting_for_signal


def _mixed() -> list[WorkflowRun]:
    """A run for every reason an operation refuses, and runs each operation applies to."""
    now = timezone.now()
    runs = list(one_of_each().values())
    runs.append(waiting_for_signal("approval", available_at=now + timedelta(hours=1))[0])
    runs.append(make_run(status="failed", error={"type": "StepLimitExceeded", "message": "reached"}))
    runs.append(make_run(status="running", started_at=now, available_at=now + timedelta(hours=1), worker_id=None))
    runs.append(make_run(status="running", cancel_requested_at=now, worker_id="w-2", available_at=now))
    runs.append(make_run(workflow_name="gone", version="v9", status="failed", error={"type": "E"}))
    runs.append(make_run(workflow_name="gone", status="completed"))
    runs.append(make_run(status="continued", finished_at=now))
    retrying = {"status": "running", "started_at": now, "available_at": now + timedelta(minutes=5)}
    runs.append(make_run(**retrying, error={"type": "E", "message": "backing off", "retry": {"scope": "step"}}))
    sleeping = make_run(status="running", started_at=now, available_at=now + timedelta(hours=2))
    make_attempt(sleeping, "nap", kind="sleep", status="running", finished_at=None)
    runs.append(sleeping)
    return runs


@pytest.mark.django_db
@pytest.mark.parametrize("operation", list(matching.OPERATIONS))
def test_the_preview_counts_the_reasons_the_operation_gives_run_by_run(operation: str) -> None:
    runs = _mixed()
    expected = Counter(operations.refusals(operation, WorkflowRun.objects.all()).values())
    if operation == "retry_now":  # the preview names no signal: the report after the action does
        expected = Counter(
            {
                (matching.WAITS_FOR_DELIVERY if "which retry now cannot deliver" in k else k): v
                for k, v in expected.items()
            }
        )
    seen = matching.preview(operation, queries.runs(), sample=5)
    assert seen.count == len(runs)
    assert Counter(seen.refused) == expected
    assert seen.would_change == len(runs) - sum(expected.values()) > 0
    assert len(seen.sample) == 5
    assert seen.sample_refusals == operations.refusals(operation, seen.sample)


@pytest.mark.django_db
def test_the_preview_of_an_empty_filter() -> None:
    make_run()
    seen = matching.preview("cancel", queries.runs().filter(workflow_name="nothing-by-this-name"), sample=10)
    assert (seen.count, seen.refused, seen.sample, seen.would_change) == (0, {}, [], 0)


@pytest.mark.django_db
def test_the_walk_goes_by_chunks_over_the_whole_filter_and_counts_what_it_did() -> None:
    eligible = [make_run(workflow_name="sleeper") for _ in range(23)]
    make_run(workflow_name="sleeper", status="completed")
    untouched = make_run()
    chunks: list[operations.BulkResult] = []
    result = matching.apply_to_matching(
        "cancel", queries.runs().filter(workflow_name="sleeper"), chunk_size=5, on_chunk=chunks.append
    )
    assert (result.matched, result.changed) == (24, 23)
    assert result.refused == Counter({"it has already finished (completed)": 1})
    assert [len(chunk.changed) + len(chunk.refused) for chunk in chunks] == [5, 5, 5, 5, 4]
    assert WorkflowRun.objects.filter(id__in=[run.id for run in eligible], status="canceled").count() == 23
    untouched.refresh_from_db()
    assert untouched.status == "pending"


@pytest.mark.django_db
def test_a_rerun_of_a_filter_does_not_reach_the_runs_it_starts() -> None:
    for _ in range(7):
        make_run(workflow_name="versioned", version="v1", status="completed")
    result = matching.apply_to_matching("rerun", queries.runs().filter(workflow_name="versioned"), chunk_size=2)
    assert (result.matched, result.changed) == (7, 7)
    assert len(result.created) == 7
    assert WorkflowRun.objects.filter(workflow_name="versioned").count() == 14


@pytest.mark.django_db
def test_a_filter_that_grew_past_the_confirmed_count_is_refused_whole() -> None:
    runs = [make_run() for _ in range(3)]
    with pytest.raises(matching.MatchCountChanged, match="matches 3 runs now, more than the 2 confirmed"):
        matching.apply_to_matching("cancel", queries.runs(), confirm_count=2)
    assert not WorkflowRun.objects.filter(status="canceled").exists()
    # Fewer than confirmed is fine: runs that left the filter meanwhile.
    result = matching.apply_to_matching("cancel", queries.runs(), confirm_count=5)
    assert result.changed == len(runs)


@pytest.mark.django_db
def test_a_run_that_changes_during_the_walk_is_refused_or_left_out_not_mishandled() -> None:
    runs = [make_run(status="failed", error={"type": "E"}) for _ in range(6)]
    last = runs[0]  # the oldest: in the last chunk

    def meanwhile(done: Any) -> None:
        WorkflowRun.objects.filter(id=last.id).update(status="completed")

    result = matching.apply_to_matching(
        "retry_from_failed_step", queries.runs().filter(status="failed"), chunk_size=2, on_chunk=meanwhile
    )
    assert (result.matched, result.changed) == (5, 5)
    last.refresh_from_db()
    assert last.status == "completed"


@pytest.mark.django_db
def test_unknown_operation_and_chunk_size_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown operation 'explode'"):
        matching.preview("explode", queries.runs())
    with pytest.raises(ValueError, match="chunk_size must be at least 1"):
        matching.apply_to_matching("cancel", queries.runs(), chunk_size=-1)
