"""A backend for Django's Tasks framework: ``@task`` functions run as durable workflow runs.

::

    TASKS = {"default": {"BACKEND": "django_openworkflow.tasks.WorkflowBackend"}}

``task.enqueue(*args, **kwargs)`` inserts, in the caller's transaction, a
run of the built-in workflow ``django.task`` whose input holds the task's
module path, its arguments and the backend's alias; a ``runworkflows``
worker (or Celery, under ``DISPATCH = "celery"``) calls the task function
inside one step, ``call``, retried by the package's default step policy
(or the backend's ``OPTIONS["RETRY_POLICY"]``). ``priority`` becomes the
run's priority, ``queue_name`` its queue, ``run_after`` its
``available_at``; ``get_result(id)`` reads the run back as a ``TaskResult``.

On Django 6 the framework is ``django.tasks``; on Django 5.2 it is the
backport, ``django-tasks`` (``pip install "django-openworkflow[tasks]"``).
This module is imported only when ``TASKS`` names it (or you import it).
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.core import checks
from django.core.serializers.json import DjangoJSONEncoder
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from . import hooks
from .conf import owf_settings
from .definitions.declare import workflow
from .definitions.flow import QUEUE_NAME, check_queue
from .definitions.registry import WorkflowSpec, registry
from .definitions.retry import RetryPolicy
from .errors import InvalidArgument, NonRetryableError, OpenWorkflowError, WorkflowCanceled
from .states import RunStatus, StepStatus

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    from .engine.context import WorkflowContext
    from .models import WorkflowRun
else:
    try:  # Django >= 6.0
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2: the backport
        try:
            from django_tasks import task_backends
        except ImportError as exc:
            raise ImportError(
                "django_openworkflow.tasks needs Django's Tasks framework: Django >= 6.0, or on Django 5.2 "
                'the django-tasks backport (pip install "django-openworkflow[tasks]")'
            ) from exc
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

__all__ = ["TASK_STEP", "TASK_WORKFLOW", "TaskReturnValueError", "WorkflowBackend", "register_task_workflow"]

TASK_WORKFLOW = "django.task"
"""The name of the built-in workflow whose runs are the tasks."""

TASK_STEP = "call"
"""The one step of a task's run: the call of the task function."""


class TaskReturnValueError(NonRetryableError, TypeError):
    """A task returned a value JSON cannot hold (a function, a set ...): the task fails at once.

    Its ``TaskError`` reads as Django's own backends report it: a
    ``TypeError`` whose traceback says "Unsupported type".
    """


_UNKNOWN_WORKER = "unknown"
"""``worker_ids`` entry of a past attempt: the journal does not record which worker made it."""


def register_task_workflow() -> WorkflowSpec:
    """Register the ``django.task`` workflow (idempotent); every process that executes tasks needs it.

    The app does it at startup when ``settings.TASKS`` names this module's
    backend, and so does every :class:`WorkflowBackend` when it is created.
    """
    spec = registry.get(TASK_WORKFLOW, None)
    if spec is not None and spec.fn is run_task:
        return spec
    registered: WorkflowSpec = workflow(name=TASK_WORKFLOW)(run_task)
    return registered


def run_task(ctx: WorkflowContext) -> Any:
    """The body of every task run: one step that calls the task function."""
    data = ctx.input
    policy = _retry_policy(data.get("backend"))
    return ctx.step.run(TASK_STEP, functools.partial(_call_task, str(ctx.run_id), data), retry_policy=policy)


def _load_task(path: Any) -> Task[Any, Any]:
    """The ``@task`` at ``path``: only declared tasks run, not any callable an input names."""
    target = import_string(str(path))
    if not isinstance(target, Task):
        raise NonRetryableError(f"{path!r} is not a task (a function decorated with @task)")
    return target


def _call_task(run_id: str, data: dict[str, Any]) -> Any:
    task = _load_task(data["task"])
    func = task.func
    args, kwargs = data.get("args") or [], data.get("kwargs") or {}
    if task.takes_context:
        backend = _backend(data.get("backend"))
        if backend is None:
            raise OpenWorkflowError(f"task backend {data.get('backend')!r} is not a WorkflowBackend in TASKS")
        args = [TaskContext(task_result=backend.get_result(run_id)), *args]
    value = async_to_sync(func)(*args, **kwargs) if iscoroutinefunction(func) else func(*args, **kwargs)
    try:  # the encoder the step's output is stored with: datetimes, decimals and UUIDs become strings
        json.dumps(value, cls=DjangoJSONEncoder)
    except TypeError as exc:
        raise TaskReturnValueError(f"Unsupported type: the return value of task {task.module_path}: {exc}") from None
    return value


def _backend(alias: Any) -> WorkflowBackend | None:
    """The configured backend ``alias`` if it is one of ours."""
    if not isinstance(alias, str):
        return None
    try:
        backend = task_backends[alias]
    except Exception:  # not in TASKS (any more)
        return None
    return backend if isinstance(backend, WorkflowBackend) else None


def _retry_policy(alias: Any) -> RetryPolicy | None:
    backend = _backend(alias)
    return None if backend is None else backend.retry_policy


def _error_path(kind: str) -> str:
    """A recorded error type as an importable exception class path, as Django's ``TaskError`` wants.

    A dotted type is a user's class (or one of this package's, as stored before
    0.3.0): already a path. A bare one is a builtin, one of this package's
    exceptions (``StepTimeout``), or a condition the engine records.
    """
    if "." in kind:
        return kind
    if kind == TaskReturnValueError.__qualname__:
        return "builtins.TypeError"  # as Django's backends report a return value JSON cannot hold
    import builtins

    from . import errors

    for module in (builtins, errors):
        found = getattr(module, kind, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return f"{found.__module__}.{found.__qualname__}"
    # Types the engine records (DeadlineExceeded, LeaseExpired, EngineError ...) are no Python classes.
    return f"{OpenWorkflowError.__module__}.{OpenWorkflowError.__qualname__}"


def _task_error(error: Mapping[str, Any]) -> TaskError:
    kind = str(error.get("type") or "Exception")
    trace = error.get("traceback") or f"{kind}: {error.get('message', '')}\n"
    return TaskError(exception_class_path=_error_path(kind), traceback=str(trace))


class WorkflowBackend(BaseTaskBackend):
    """Django Tasks backend: each enqueued task is a durable run of the ``django.task`` workflow.

    ``QUEUES`` (default ``["default"]``) lists the queue names tasks may
    use; they are the runs' queues, so ``runworkflows --queue NAME`` serves
    them. ``OPTIONS["RETRY_POLICY"]``: a :class:`RetryPolicy` (or a dict of
    its arguments) for the call of the task function; default, the package's
    step policy (10 attempts, 1 s doubling to 100 s).
    """

    supports_defer = True
    supports_async_task = True  # called through async_to_sync inside the step
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        register_task_workflow()

    @property
    def retry_policy(self) -> RetryPolicy | None:
        policy = self.options.get("RETRY_POLICY")
        if policy is None or isinstance(policy, RetryPolicy):
            return policy
        return RetryPolicy(**policy)

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        try:
            check_queue(task.queue_name, f"task {task.module_path}")
        except InvalidArgument as exc:
            raise InvalidTask(str(exc)) from None

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        """Insert the task's run in the current transaction; the result is READY.

        A transaction the caller has open on another database than the
        workflow tables' (``default``, when ``OPENWORKFLOW["DATABASE"]``
        names an alias of their own) is waited for: the run is inserted when
        it commits, and never if it rolls back.
        """
        from .client.runs import start_run_with_id
        from .store.commits import after_callers_commits, callers_transactions

        self.validate_task(task)
        run_after = task.run_after
        # normalize_json gives a list for a list, a dict for a dict.
        task_args: list[Any] = normalize_json(list(args))  # type: ignore[assignment]
        task_kwargs: dict[str, Any] = normalize_json(dict(kwargs))  # type: ignore[assignment]
        data = {
            "task": task.module_path,
            "args": task_args,
            "kwargs": task_kwargs,
            "backend": self.alias,
            "run_after": None if run_after is None else run_after.isoformat(),
        }
        spec = register_task_workflow()
        start = functools.partial(
            start_run_with_id,
            workflow_name=TASK_WORKFLOW,
            input=data,
            version=spec.version,
            available_at=run_after,
            queue=task.queue_name,
            priority=task.priority,
        )
        workflow_alias = owf_settings.database
        if not callers_transactions(exclude=[workflow_alias]):
            result = self._result(start(None).fetch(), task)
            task_enqueued.send(type(self), task_result=result)
            return result
        run_id = uuid.uuid4()

        def insert() -> None:
            enqueued = self._result(start(run_id).fetch(), task)
            task_enqueued.send(type(self), task_result=enqueued)

        after_callers_commits(insert, exclude=[workflow_alias])
        return TaskResult(
            task=task,
            id=str(run_id),
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=task_args,
            kwargs=task_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        from .models import WorkflowRun

        try:
            run = WorkflowRun.objects.get(id=uuid.UUID(str(result_id)), workflow_name=TASK_WORKFLOW)
        except (ValueError, WorkflowRun.DoesNotExist):
            raise TaskResultDoesNotExist(result_id) from None
        return self._result(run)

    def check(self, **kwargs: Any) -> list[Any]:
        from django.apps import apps

        errors: list[Any] = []
        if not apps.is_installed("django_openworkflow"):
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses {type(self).__module__}.{type(self).__qualname__}, "
                    "but 'django_openworkflow' is not in INSTALLED_APPS",
                    hint="Add 'django_openworkflow' to INSTALLED_APPS: tasks are stored as its runs, "
                    "in its tables, and its runworkflows command executes them.",
                    id="openworkflow.E042",
                )
            )
        bad = sorted(name for name in self.queues if not isinstance(name, str) or not QUEUE_NAME.match(name))
        if bad:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] has names that are no workflow queue names: {bad!r:.200}",
                    hint="Queue names are 1 to 64 letters, digits, '_', '.', ':' or '-'.",
                    id="openworkflow.E040",
                )
            )
        try:
            self.retry_policy  # noqa: B018  (validates)
        except (TypeError, ValueError) as exc:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RETRY_POLICY'] is invalid: {exc}",
                    hint="Give a django_openworkflow.RetryPolicy or a dict of its arguments.",
                    id="openworkflow.E041",
                )
            )
        return errors

    # -- reading a run as a TaskResult --

    def _task(self, run: WorkflowRun, data: Mapping[str, Any]) -> Task[Any, Any]:
        """The Task as enqueued: the module's task with the run's priority, queue and run_after."""
        alias = data.get("backend") if _backend(data.get("backend")) is not None else self.alias
        run_after = parse_datetime(data["run_after"]) if data.get("run_after") else None
        return _load_task(data.get("task")).using(
            priority=run.priority, queue_name=run.queue, run_after=run_after, backend=alias
        )

    def _result(self, run: WorkflowRun, task: Task[Any, Any] | None = None) -> TaskResult[Any, Any]:
        from .models import StepAttempt

        data = run.input if isinstance(run.input, dict) else {}
        attempts = list(
            StepAttempt.objects.filter(workflow_run_id=run.id, step_name=TASK_STEP)
            .order_by("id")
            .values("status", "error", "started_at")
        )
        held = run.status == RunStatus.RUNNING and run.worker_id is not None
        count = len(attempts)
        if held and not any(a["status"] == StepStatus.RUNNING for a in attempts):
            count += 1  # the first step of a slice records no start: the attempt under way
        worker_ids = [_UNKNOWN_WORKER] * count
        if held and count:
            worker_ids[-1] = str(run.worker_id)
        errors = [_task_error(a["error"] or {}) for a in attempts if a["status"] == StepStatus.FAILED]
        if run.status == RunStatus.FAILED and run.error and run.error.get("step") != TASK_STEP:
            errors.append(_task_error(run.error))  # failed outside the call: a deadline, an engine error
        if run.status == RunStatus.CANCELED:
            path = f"{WorkflowCanceled.__module__}.{WorkflowCanceled.__qualname__}"
            errors.append(TaskError(exception_class_path=path, traceback=f"workflow run {run.id} was canceled\n"))
        started = [a["started_at"] for a in attempts if a["started_at"] is not None]
        result: TaskResult[Any, Any] = TaskResult(
            task=task if task is not None else self._task(run, data),
            id=str(run.id),
            status=_status(run),
            enqueued_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
            last_attempted_at=max(started, default=run.started_at),
            args=data.get("args") or [],
            kwargs=data.get("kwargs") or {},
            backend=str(data.get("backend") or self.alias),
            errors=errors,
            worker_ids=worker_ids,
        )
        if run.status == RunStatus.COMPLETED:
            object.__setattr__(result, "_return_value", run.output)
        return result


def _status(run: WorkflowRun) -> TaskResultStatus:
    if run.status == RunStatus.COMPLETED:
        return TaskResultStatus.SUCCESSFUL
    if run.status in (RunStatus.FAILED, RunStatus.CANCELED):
        return TaskResultStatus.FAILED
    if run.status == RunStatus.RUNNING and run.worker_id is not None:
        return TaskResultStatus.RUNNING
    # Pending, or parked: backing off before the next attempt ("ready to be executed again").
    return TaskResultStatus.READY


# -- Django's task_started / task_finished, from the workflow hooks --


def _send_task_signal(signal: Any, run_id: Any) -> None:
    from .models import WorkflowRun

    if not signal.has_listeners():
        return
    run = WorkflowRun.objects.filter(id=run_id).first()
    backend = None if run is None or not isinstance(run.input, dict) else _backend(run.input.get("backend"))
    if run is None or backend is None:
        return
    result = backend._result(run)
    if signal is not task_finished or result.status != TaskResultStatus.FAILED:
        signal.send(type(backend), task_result=result)
        return
    # Django's backends send task_finished inside their ``except`` block, and its
    # receiver logs the failure with the exception being handled: so do we.
    try:
        raise _exception(_failure(run))
    except BaseException as exc:
        exc.__traceback__ = None  # this frame says nothing: the note holds the task's traceback
        signal.send(type(backend), task_result=result)


def _failure(run: WorkflowRun) -> Mapping[str, Any]:
    """The error that failed a task's run: its cancel, a deadline or engine error, or the call's last one."""
    from .models import StepAttempt

    if run.status == RunStatus.CANCELED:
        return {"type": WorkflowCanceled.__name__, "message": f"workflow run {run.id} was canceled"}
    if run.error and run.error.get("step") != TASK_STEP:
        return run.error
    attempt = (
        StepAttempt.objects.filter(workflow_run_id=run.id, step_name=TASK_STEP, status=StepStatus.FAILED)
        .order_by("-id")
        .values("error")
        .first()
    )
    return (attempt or {}).get("error") or run.error or {}


def _exception(error: Mapping[str, Any]) -> BaseException:
    """An exception of the recorded error's class and message, its traceback text as a note."""
    task_error = _task_error(error)
    message = str(error.get("message") or "")
    exc: object = None
    try:
        exc = task_error.exception_class(message)
    except Exception:  # not importable any more, or a constructor that wants other arguments
        pass
    if not isinstance(exc, BaseException):
        exc = OpenWorkflowError(f"{task_error.exception_class_path}: {message}")
    if error.get("traceback"):
        exc.add_note(f"The task's traceback, as the worker recorded it:\n{str(error['traceback']).rstrip()}")
    return exc


def _on_run_started(sender: Any, *, run_id: Any, **kwargs: Any) -> None:
    if sender == TASK_WORKFLOW:
        _send_task_signal(task_started, run_id)


def _on_run_finished(sender: Any, *, run_id: Any, **kwargs: Any) -> None:
    if sender == TASK_WORKFLOW:
        _send_task_signal(task_finished, run_id)


# Connected for every sender: hooks send the workflow name read from the database, a different str object.
hooks.run_started.connect(_on_run_started, dispatch_uid="django_openworkflow.tasks.started")
hooks.run_finished.connect(_on_run_finished, dispatch_uid="django_openworkflow.tasks.finished")
