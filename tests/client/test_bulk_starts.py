"""spec.run_many / start_runs: many starts in a few statements, idempotency keys honoured per run."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_openworkflow import PayloadError, start_runs, workflow
from django_openworkflow.definitions.flow import Debounce
from django_openworkflow.errors import InvalidArgument
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import race
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)


@workflow(name="bulk-debounced", debounce=Debounce("1s", key=lambda input: "all"))
def debounced(ctx):
    return ctx.input


def test_run_many_starts_one_pending_run_per_input_in_order(django_assert_max_num_queries):
    # Batches of rows, not one statement per run (SQLite's 999 parameters make its batches the smallest).
    with django_assert_max_num_queries(50):
        handles = three_steps.run_many([{"n": i} for i in range(500)], queue="bulk", priority=3)
    assert len(handles) == 500 and all(handle.created for handle in handles)
    runs = WorkflowRun.objects.in_bulk([handle.id for handle in handles])
    assert [runs[handle.id].input for handle in handles] == [{"n": i} for i in range(500)]
    assert {(run.status, run.workflow_name, run.queue, run.priority) for run in runs.values()} == {
        ("pending", "three-steps", "bulk", 3)
    }


def test_keys_return_existing_runs_and_the_first_of_a_repeated_key():
    earlier = three_steps.run({"n": "earlier"}, idempotency_key="k1")
    handles = three_steps.run_many(
        [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}],
        idempotency_keys=["k1", "k2", None, "k2", "k3"],
    )
    assert handles[0] == earlier and not handles[0].created
    assert handles[1].created and handles[3] == handles[1] and not handles[3].created
    assert handles[2].created and handles[4].created
    assert WorkflowRun.objects.count() == 4  # earlier, k2, the unkeyed one, k3
    assert WorkflowRun.objects.get(id=handles[1].id).input == {"n": 1}  # the first input with k2 wins


def test_concurrent_bulk_starts_with_the_same_keys_make_one_run_per_key():
    keys = [f"order-{i}" for i in range(50)]
    results = race(lambda: [h.id for h in three_steps.run_many([{"k": k} for k in keys], idempotency_keys=keys)], 4)
    assert all(ids == results[0] for ids in results)
    assert WorkflowRun.objects.count() == 50


def test_bad_input_names_its_index_and_nothing_is_written():
    with pytest.raises(PayloadError, match="input 2 of workflow 'three-steps'"):
        three_steps.run_many([{"n": 0}, {"n": 1}, {"n": "bad\x00"}])
    with pytest.raises(InvalidArgument, match="2 idempotency keys for 3 inputs"):
        three_steps.run_many([1, 2, 3], idempotency_keys=["a", "b"])
    with pytest.raises(ValueError, match="idempotency_key"):
        three_steps.run_many([1], idempotency_keys=["k" * 256])
    with pytest.raises(InvalidArgument, match="debounces its starts"):
        debounced.run_many([1, 2])
    with pytest.raises(ValueError, match="already in the past"):
        start_runs("three-steps", [1], deadline_at=timezone.now() - timedelta(seconds=1))
    assert WorkflowRun.objects.count() == 0


def test_run_many_joins_the_callers_transaction():
    # The transaction on the workflow tables' alias ("other" when the suite runs them on their own).
    with pytest.raises(RuntimeError), transaction.atomic(using=get_backend().alias):
        three_steps.run_many([1, 2, 3], idempotency_keys=["a", "b", None])
        raise RuntimeError("roll back")
    assert WorkflowRun.objects.count() == 0
    assert three_steps.run_many([], idempotency_keys=[]) == []


def test_runs_started_in_bulk_are_worked_like_any_other(run_worker):
    handles = three_steps.run_many([{"n": i} for i in range(20)], available_at="0s")
    run_worker()
    assert {handle.status() for handle in handles} == {"completed"}


def test_a_row_naming_no_column_of_a_run_fails_and_inserts_nothing():
    # The start's INSERT is written from the row's keys: a misspelt one must not vanish.
    with pytest.raises(TypeError, match="not columns of a run: priorty"):
        get_backend().insert_runs([{"workflow_name": "x", "version": "1", "input": None, "priorty": 3}])
    assert not WorkflowRun.objects.exists()


def test_runs_started_without_a_time_are_due_at_the_database_clock():
    before = get_backend().now()
    handles = three_steps.run_many([{"n": 1}, {"n": 2}])
    single = three_steps.run({"n": 3})
    after = get_backend().now()
    for run in WorkflowRun.objects.filter(id__in=[*(h.id for h in handles), single.id]):
        assert before <= run.available_at <= after
        assert run.status == "pending" and run.attempts == 0 and run.queue == "default"


def test_a_start_of_several_batches_mixes_due_now_and_delayed_runs():
    # 2,500 rows: more than one statement on every database; the runs due "now" take the
    # database clock as SQL, with no parameter, so a batch's parameters are not one per column.
    later = get_backend().now() + timedelta(hours=1)
    rows = [
        {"workflow_name": "x", "version": "1", "input": {"n": i}, "available_at": later if i % 3 else None}
        for i in range(2_500)
    ]
    inserted = get_backend().insert_runs(rows)
    assert len(inserted) == 2_500 and all(created for _, created in inserted)
    assert WorkflowRun.objects.filter(available_at=later).count() == sum(1 for i in range(2_500) if i % 3)
    assert sorted(WorkflowRun.objects.values_list("input__n", flat=True)) == list(range(2_500))
