"""Stand-ins that put WorkflowBackend where Django's own tests name the dummy and the immediate backends.

``run_upstream_tasks.py`` rewrites Django's ``tests/tasks/`` to name these.
``DummyWorkflowBackend``: enqueued tasks are runs nobody executes (no
worker serves its queues while the tests that use it run), with the
dummy's ``results`` and ``clear()``. ``ImmediateWorkflowBackend``: the
enqueue returns once a real ``runworkflows`` process has executed the run.
"""

from __future__ import annotations

import time
from typing import Any

from django_openworkflow.models import WorkflowRun
from django_openworkflow.tasks import TASK_WORKFLOW, WorkflowBackend

WAIT_SECONDS = 30.0


class DummyWorkflowBackend(WorkflowBackend):
    @property
    def results(self) -> list[Any]:
        runs = WorkflowRun.objects.filter(workflow_name=TASK_WORKFLOW).order_by("created_at", "id")
        return [self._result(run) for run in runs]

    def clear(self) -> None:
        WorkflowRun.objects.filter(workflow_name=TASK_WORKFLOW).delete()


class ImmediateWorkflowBackend(WorkflowBackend):
    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        result = super().enqueue(task, args, kwargs)
        give_up = time.monotonic() + WAIT_SECONDS
        while not result.is_finished:
            if time.monotonic() > give_up:
                raise AssertionError(f"no runworkflows worker finished task {result.id} in {WAIT_SECONDS:g}s")
            time.sleep(0.02)
            result = self.get_result(result.id)
        return result
