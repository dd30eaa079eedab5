"""Django Tasks on workflow runs: ``TASKS = {"default": {"BACKEND": "django_openworkflow.tasks.WorkflowBackend"}}``.

The expectations of Django's own tasks tests (tests/tasks/ in Django:
test_dummy_backend.py, test_immediate_backend.py, test_tasks.py) that apply
to a durable backend, on the real database, with the in-process worker.
Runs on Django 6 (django.tasks) and on Django 5.2 with the django-tasks
backport; skipped when neither is installed.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

try:  # Django >= 6.0
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport, if installed
    pytest.importorskip("django_tasks", reason="neither django.tasks (Django >= 6) nor django_tasks is installed")
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

from django_openworkflow import RetryPolicy, start_run
from django_openworkflow.client import operations
from django_openworkflow.definitions.registry import registry
from django_openworkflow.errors import OpenWorkflowError
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.tasks import TASK_WORKFLOW, WorkflowBackend

pytestmark = pytest.mark.django_db(transaction=True)

BACKEND = "django_openworkflow.tasks.WorkflowBackend"
FAST_RETRIES = RetryPolicy(initial_interval="10ms", maximum_interval="10ms", maximum_attempts=2)
TASKS = {
    "default": {"BACKEND": BACKEND, "QUEUES": ["default", "emails"], "OPTIONS": {"RETRY_POLICY": FAST_RETRIES}},
    "anyqueue": {"BACKEND": BACKEND, "QUEUES": []},
}


@pytest.fixture(scope="module", autouse=True)
def tasks_setting():
    """TASKS names our backend for the whole module; the task functions are decorated under it."""
    registered_before = registry.get(TASK_WORKFLOW, None) is not None
    override = override_settings(TASKS=TASKS)
    override.enable()
    try:
        yield
    finally:
        override.disable()
        if not registered_before:
            registry.unregister(TASK_WORKFLOW, None)


@pytest.fixture
def fn():
    """The task functions module (imported under the module's TASKS)."""
    from tests.fixtures import task_functions

    task_functions.CALLS.clear()
    return task_functions


def finished(result):
    def check():
        result.refresh()
        return result.is_finished

    return check


# -- the backend --


def test_the_backend_is_ours_and_says_what_it_supports():
    assert isinstance(task_backends["default"], WorkflowBackend)
    assert isinstance(task_backends["anyqueue"], WorkflowBackend)
    assert default_task_backend.supports_defer
    assert default_task_backend.supports_async_task
    assert default_task_backend.supports_get_result
    assert default_task_backend.supports_priority
    assert registry.get(TASK_WORKFLOW, None) is not None
    assert default_task_backend.check() == []


def test_queue_names_that_are_no_workflow_queues_fail_the_check():
    backend = WorkflowBackend("bad", {"QUEUES": ["default", "two words"], "OPTIONS": {"RETRY_POLICY": {"x": 1}}})
    assert {error.id for error in backend.check()} == {"openworkflow.E040", "openworkflow.E041"}


def test_the_backend_without_the_app_installed_fails_the_check():
    from django.apps import apps

    apps.set_available_apps([app.name for app in apps.get_app_configs() if app.name != "django_openworkflow"])
    try:
        errors = default_task_backend.check()
    finally:
        apps.unset_available_apps()
    assert [error.id for error in errors] == ["openworkflow.E042"]
    assert "INSTALLED_APPS" in errors[0].msg
    assert default_task_backend.check() == []


# -- enqueue --


def test_enqueue_returns_a_ready_result_backed_by_a_run(fn):
    result = fn.add.enqueue(1, 2, times=3)

    assert result.status == TaskResultStatus.READY
    assert result.id and str(uuid.UUID(result.id)) == result.id
    assert result.task == fn.add
    assert (result.args, result.kwargs) == ([1, 2], {"times": 3})
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert not result.is_finished
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018

    run = WorkflowRun.objects.get(id=result.id)
    assert (run.workflow_name, run.status, run.queue, run.priority) == (TASK_WORKFLOW, "pending", "default", 0)
    assert run.input["task"] == fn.add.module_path == "tests.fixtures.task_functions.add"
    assert (run.input["args"], run.input["kwargs"]) == ([1, 2], {"times": 3})


def test_get_result_round_trip_and_refresh(fn):
    result = fn.add.enqueue(1, 2)
    assert default_task_backend.get_result(result.id) == result
    assert fn.add.get_result(result.id) == result
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_async_enqueue_and_get_result(fn):
    result = async_to_sync(fn.noop.aenqueue)()
    assert result.status == TaskResultStatus.READY
    assert async_to_sync(default_task_backend.aget_result)(result.id) == result
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.READY


def test_unknown_result_ids_do_not_exist(fn):
    other = WorkflowRun.objects.create(workflow_name="not-a-task", available_at=timezone.now())
    for result_id in ("123", str(uuid.uuid4()), str(other.id)):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(default_task_backend.aget_result)("123")


def test_enqueue_sends_task_enqueued(fn):
    seen = []

    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = fn.noop.enqueue()
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(WorkflowBackend, result.id, TaskResultStatus.READY)]


def test_priority_queue_and_run_after_become_the_runs(fn):
    later = timezone.now() + timedelta(hours=1)
    result = fn.send_email.using(priority=-7, run_after=later).enqueue("ada@example.com")
    run = WorkflowRun.objects.get(id=result.id)
    assert (run.queue, run.priority, run.available_at) == ("emails", -7, later)
    back = default_task_backend.get_result(result.id)
    assert (back.task.queue_name, back.task.priority, back.task.run_after) == ("emails", -7, later)
    assert back == result


def test_enqueue_inside_a_rolled_back_transaction_leaves_nothing(fn):
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        result = fn.add.enqueue(1, 1)
        assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
        raise Rollback
    assert not WorkflowRun.objects.filter(workflow_name=TASK_WORKFLOW).exists()
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_arguments_that_are_not_json_are_refused_before_anything_is_written(fn):
    with pytest.raises(TypeError):
        fn.add.enqueue(datetime.now(), 1)
    assert not WorkflowRun.objects.exists()


# -- validation (Django's InvalidTask) --


def test_priorities_outside_django_range_are_invalid(fn):
    for priority in (-101, 101):
        with pytest.raises(InvalidTask, match="priority"):
            task(priority=priority)(fn.plain)
        with pytest.raises(InvalidTask, match="priority"):
            fn.add.using(priority=priority)
    assert task(priority=100)(fn.plain).priority == 100


def test_queues_must_be_listed_and_be_workflow_queue_names(fn):
    with pytest.raises(InvalidTask, match="Queue 'other' is not valid"):
        task(queue_name="other")(fn.plain)
    # QUEUES = []: any queue, as long as it is a workflow queue name.
    anyqueue = task(queue_name="reports", backend="anyqueue")(fn.plain)
    assert WorkflowRun.objects.get(id=anyqueue.enqueue().id).queue == "reports"
    with pytest.raises(InvalidTask, match="queue must be"):
        task(queue_name="two words", backend="anyqueue")(fn.plain)
    with pytest.raises(InvalidTask, match="queue must be"):
        task(queue_name="x" * 65, backend="anyqueue")(fn.plain)


def test_run_after_must_be_aware_and_functions_module_level(fn):
    with pytest.raises(InvalidTask, match="aware"):
        fn.add.using(run_after=datetime.now())

    def local():
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task(local)
    with pytest.raises(InvalidTask, match="context"):
        task(takes_context=True)(fn.plain)


# -- execution by a worker --


def test_a_worker_runs_the_task_successfully(fn, run_worker):
    started, ended = [], []

    def on_started(sender, task_result, **kwargs):
        started.append((task_result.id, task_result.status))

    def on_finished(sender, task_result, **kwargs):
        ended.append((task_result.id, task_result.status))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        result = fn.add.enqueue(2, 3, times=2)
        run_worker(until=finished(result))
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)

    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 10
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.last_attempted_at <= result.finished_at
    assert result.attempts == 1 and len(result.worker_ids) == 1
    assert started == [(result.id, TaskResultStatus.RUNNING)]
    assert ended == [(result.id, TaskResultStatus.SUCCESSFUL)]
    assert fn.add.get_result(result.id).return_value == 10


def test_return_values_are_json(fn, run_worker):
    result = fn.returns_tuple.enqueue()
    run_worker(until=finished(result))
    assert result.return_value == [1, "two", {"three": [3]}]


def test_async_task_functions_run(fn, run_worker):
    result = fn.add_async.enqueue(20, 22)
    run_worker(until=finished(result))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 42)


def test_a_failing_task_is_retried_then_failed_with_its_errors(fn, run_worker):
    result = fn.always_fails.enqueue("boom")
    run_worker(until=finished(result))

    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018
    # OPTIONS["RETRY_POLICY"]: two attempts, each one error.
    assert result.attempts == 2
    assert [error.exception_class_path for error in result.errors] == ["builtins.ValueError"] * 2
    assert result.errors[0].exception_class is ValueError
    assert "ValueError: boom" in result.errors[-1].traceback
    assert "always_fails" in result.errors[-1].traceback


def test_a_non_retryable_error_fails_the_task_at_once(fn, run_worker):
    result = fn.fails_not_retryable.enqueue()
    run_worker(until=finished(result))
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == ["django_openworkflow.errors.NonRetryableError"]
    assert result.attempts == 1


def test_a_task_that_takes_context_gets_its_result_and_attempt(fn, run_worker):
    result = fn.flaky_with_context.enqueue("ctx")
    run_worker(until=finished(result))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"attempt": 2, "id": result.id, "status": str(TaskResultStatus.RUNNING)}
    assert result.attempts == 2
    assert [error.exception_class_path for error in result.errors] == ["builtins.RuntimeError"]


def test_run_after_in_the_future_is_not_claimed(fn, run_worker):
    later = fn.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    now = fn.add.enqueue(2, 2)
    run_worker()  # burst: exits when nothing is due
    later.refresh()
    now.refresh()
    assert now.status == TaskResultStatus.SUCCESSFUL
    assert later.status == TaskResultStatus.READY
    assert later.started_at is None


def test_a_queue_is_served_only_by_workers_of_that_queue(fn, run_worker):
    result = fn.send_email.enqueue("ada@example.com")
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.READY
    run_worker(until=finished(result), queues=["emails"])
    assert result.return_value == "sent to ada@example.com"


def test_higher_priority_is_claimed_first(fn):
    low = fn.noop.using(priority=-5).enqueue()
    mid = fn.noop.enqueue()
    high = fn.noop.using(priority=100).enqueue()
    claimed = get_backend().claim("w1", 3, timedelta(seconds=30), ("default",))
    assert [str(c.run.id) for c in claimed] == [high.id, mid.id, low.id]
    assert default_task_backend.get_result(high.id).status == TaskResultStatus.RUNNING
    assert default_task_backend.get_result(high.id).worker_ids == ["w1"]


def test_a_canceled_task_is_failed(fn):
    result = fn.noop.enqueue()
    operations.cancel(result.id)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == ["django_openworkflow.errors.WorkflowCanceled"]
    assert issubclass(result.errors[0].exception_class, OpenWorkflowError)


def test_a_run_naming_something_that_is_no_task_fails_without_calling_it(fn, run_worker):
    # The admin's "start a run" form or the CLI could name any callable: only @task functions run.
    handle = start_run(
        TASK_WORKFLOW, {"task": "tests.fixtures.task_functions.plain", "args": ["x"], "backend": "default"}
    )
    run_worker(until=lambda: handle.status() == "failed")
    assert handle.fetch().error["type"] == "StepFailed"
    attempts = handle.fetch().step_attempts.all()
    assert [a.error["type"] for a in attempts] == ["NonRetryableError"]
    assert "is not a task" in attempts[0].error["message"]


@pytest.mark.parametrize(
    ("stored", "path"),
    [
        ("StepFailed", "django_openworkflow.errors.StepFailed"),
        ("NonRetryableError", "django_openworkflow.errors.NonRetryableError"),
        ("django_openworkflow.errors.StepTimeout", "django_openworkflow.errors.StepTimeout"),  # stored before 0.3.0
        ("ValueError", "builtins.ValueError"),
        ("LeaseExpired", "django_openworkflow.errors.OpenWorkflowError"),  # an engine condition, no class
        ("tests.fixtures.task_functions.Missing", "tests.fixtures.task_functions.Missing"),
    ],
)
def test_a_stored_error_type_becomes_an_exception_class_path_in_either_form(stored, path):
    from django_openworkflow.tasks import _task_error

    error = _task_error({"type": stored, "message": "m"})
    assert error.exception_class_path == path
    if not stored.startswith("tests."):
        assert issubclass(error.exception_class, BaseException)


# -- what Django's own backends do (Django's and the backport's test suites) --


@pytest.fixture
def tasks_log(caplog):
    """The records of Django's tasks logger ("django.tasks"; the backport's "django_tasks")."""
    caplog.set_level("INFO", logger="django.tasks")
    caplog.set_level("INFO", logger="django_tasks")
    return lambda: [r for r in caplog.records if r.name in ("django.tasks", "django_tasks")]


def test_the_failure_log_record_carries_the_tasks_exception(fn, run_worker, tasks_log):
    result = fn.always_fails.enqueue("boom")
    run_worker(until=finished(result))
    assert result.status == TaskResultStatus.FAILED

    (record,) = [r for r in tasks_log() if r.levelname == "ERROR"]
    assert result.id in record.getMessage() and "state=FAILED" in record.getMessage()
    assert record.exc_info and record.exc_info[0] is ValueError
    assert str(record.exc_info[1]) == "boom"
    logged = logging.Formatter().formatException(record.exc_info)
    assert "ValueError: boom" in logged and "always_fails" in logged  # the worker's traceback, as a note
    assert "NoneType: None" not in logged


def test_a_canceled_tasks_failure_log_names_the_cancel(fn, tasks_log):
    result = fn.noop.enqueue()
    operations.cancel(result.id)
    (record,) = [r for r in tasks_log() if r.levelname == "ERROR"]
    assert record.exc_info and record.exc_info[0].__name__ == "WorkflowCanceled"


def test_a_return_value_json_cannot_hold_fails_the_task_with_a_type_error_at_once(fn, run_worker):
    result = fn.returns_a_function.enqueue()
    run_worker(until=finished(result))
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1  # no retry fixes it
    assert [error.exception_class for error in result.errors] == [TypeError]
    assert "Unsupported type" in result.errors[0].traceback


def test_a_returned_datetime_comes_back_as_a_string(fn, run_worker):
    # Unlike Django's backends (which fail the task): stored as every step output is.
    result = fn.returns_a_datetime.enqueue()
    run_worker(until=finished(result))
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "2026-01-02T03:04:05Z")


class ProjectBackend(WorkflowBackend):
    """A project's own subclass, named in TASKS by its path."""


def test_a_subclass_of_the_backend_in_tasks_registers_the_task_workflow_at_startup():
    from django_openworkflow.apps import _tasks_backend_configured

    with override_settings(TASKS={"default": {"BACKEND": "tests.test_tasks.ProjectBackend"}}):
        assert _tasks_backend_configured()
    with override_settings(TASKS={"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}):
        assert not _tasks_backend_configured()
    with override_settings(TASKS={"default": {"BACKEND": "does.not.exist"}}):
        assert not _tasks_backend_configured()
