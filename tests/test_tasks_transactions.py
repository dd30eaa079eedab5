"""Django Tasks with the workflow tables on an alias of their own: an enqueue waits for the caller's commit.

``OPENWORKFLOW["DATABASE"] = "other"``: a task enqueued inside
``transaction.atomic()`` on ``default`` is inserted when that transaction
commits and never if it rolls back, as with one database (where the run's
row is part of the transaction). Real databases, both aliases.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from django_openworkflow.models import WorkflowRun
from django_openworkflow.tasks import TASK_WORKFLOW
from django_openworkflow.testing import override_openworkflow
from tests.test_tasks import fn, tasks_setting  # noqa: F401  (the fixtures)

try:  # Django >= 6.0
    from django.tasks import TaskResultStatus, default_task_backend
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2: the backport (tests.test_tasks skips the module without it)
    from django_tasks import TaskResultStatus, default_task_backend
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued

pytestmark = [
    pytest.mark.django_db(databases=["default", "other"], transaction=True),
    pytest.mark.usefixtures("on_other"),
]


class Rollback(Exception):
    pass


@pytest.fixture
def on_other():
    with override_openworkflow(DATABASE="other"):
        yield


@pytest.fixture
def enqueued():
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append(task_result.id)

    task_enqueued.connect(receiver)
    yield seen
    task_enqueued.disconnect(receiver)


def task_runs():
    return WorkflowRun.objects.using("other").filter(workflow_name=TASK_WORKFLOW)


def test_an_enqueue_inside_a_transaction_on_default_is_inserted_when_it_commits(fn, enqueued):  # noqa: F811
    with transaction.atomic():
        result = fn.add.enqueue(1, 2)
        assert result.status == TaskResultStatus.READY
        assert not task_runs().exists() and enqueued == []  # not before the commit
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result.id)
    run = task_runs().get()
    assert str(run.id) == result.id and enqueued == [result.id]
    back = default_task_backend.get_result(result.id)
    assert (back.status, back.args, back.task.func) == (TaskResultStatus.READY, [1, 2], fn.add.func)


def test_an_enqueue_inside_a_rolled_back_transaction_on_default_is_never_sent(fn, enqueued):  # noqa: F811
    with pytest.raises(Rollback), transaction.atomic():
        result = fn.add.enqueue(1, 1)
        raise Rollback
    assert not task_runs().exists() and enqueued == []
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_a_rolled_back_savepoint_drops_its_enqueue_only(fn):  # noqa: F811
    with transaction.atomic():
        kept = fn.add.enqueue(1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            fn.add.enqueue(2, 2)
            raise Rollback
    assert [str(run_id) for run_id in task_runs().values_list("id", flat=True)] == [kept.id]


def test_an_enqueue_inside_a_transaction_on_the_workflow_alias_is_part_of_it(fn):  # noqa: F811
    with pytest.raises(Rollback), transaction.atomic(using="other"):
        result = fn.add.enqueue(1, 1)
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY  # in this transaction
        raise Rollback
    assert not task_runs().exists()


def test_an_enqueue_outside_any_transaction_is_inserted_at_once(fn, enqueued):  # noqa: F811
    result = fn.add.enqueue(3, 4)
    assert str(task_runs().get().id) == result.id and enqueued == [result.id]


@pytest.mark.django_db(databases=["default", "other"])  # the test's transaction, as a TestCase's
def test_in_a_testcase_the_commit_callbacks_of_default_insert_the_run(fn, django_capture_on_commit_callbacks):  # noqa: F811
    outside = fn.add.enqueue(5, 6)  # no transaction of the test's own: at once
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        inside = fn.add.enqueue(7, 8)
        assert not task_runs().filter(id=inside.id).exists()
    assert set(task_runs().values_list("id", flat=True)) == {uuid.UUID(outside.id), uuid.UUID(inside.id)}
