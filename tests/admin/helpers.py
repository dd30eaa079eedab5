"""Runs, step attempts and URLs the admin's tests build their pages from."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.urls import reverse
from django.utils import timezone

from django_openworkflow.models import StepAttempt, WorkflowRun

LIST_URL = reverse("admin:django_openworkflow_workflowrun_changelist")
ADD_URL = reverse("admin:django_openworkflow_workflowrun_add")
XSS = "<script>alert(1)</script>"


def run_url(run: WorkflowRun | Any) -> str:
    return reverse("admin:django_openworkflow_workflowrun_change", args=[getattr(run, "id", run)])


def action_url(run: WorkflowRun, action: str) -> str:
    return reverse("admin:django_openworkflow_workflowrun_action", args=[run.id, action])


def signal_url(run: WorkflowRun | Any) -> str:
    return reverse("admin:django_openworkflow_workflowrun_signal", args=[getattr(run, "id", run)])


def make_run(**fields: Any) -> WorkflowRun:
    values: dict[str, Any] = {
        "workflow_name": "three-steps",
        "version": None,
        "status": "pending",
        "input": {"start": 1},
        "available_at": timezone.now(),
    }
    values.update(fields)
    return WorkflowRun.objects.create(**values)


def make_attempt(run: WorkflowRun, step_name: str, **fields: Any) -> StepAttempt:
    started = fields.pop("started_at", timezone.now())
    values: dict[str, Any] = {
        "kind": "run",
        "status": "completed",
        "started_at": started,
        "finished_at": started + timedelta(milliseconds=20),
    }
    values.update(fields)
    return StepAttempt.objects.create(workflow_run=run, step_name=step_name, **values)


def one_of_each() -> dict[str, WorkflowRun]:
    """A run in every display status."""
    now = timezone.now()
    return {
        "pending": make_run(),
        "running": make_run(
            status="running", worker_id="w-1", started_at=now, available_at=now + timedelta(seconds=30)
        ),
        "parked": make_run(
            workflow_name="sleeper",
            status="running",
            started_at=now,
            available_at=now + timedelta(minutes=4, seconds=30),
        ),
        "completed": make_run(
            status="completed", output={"result": 11}, started_at=now, finished_at=now + timedelta(seconds=2)
        ),
        "failed": make_run(
            workflow_name="always-fails",
            status="failed",
            error={"type": "ValueError", "message": "kaboom"},
            started_at=now,
            finished_at=now,
        ),
        "canceled": make_run(workflow_name="versioned", version="v1", status="canceled", finished_at=now),
    }


def parked_in_a_sleep() -> WorkflowRun:
    """The parked run of one_of_each(), with its open sleep in the journal."""
    run = one_of_each()["parked"]
    make_attempt(
        run,
        "nap",
        kind="sleep",
        status="running",
        finished_at=None,
        context={"resume_at": run.available_at.isoformat()},
    )
    return run


def waiting_for_signal(name: str = "approval", **fields: Any) -> tuple[WorkflowRun, StepAttempt]:
    """A parked run whose journal ends in an open wait for signal ``name``."""
    now = timezone.now()
    run = make_run(workflow_name="approval", status="running", started_at=now, **fields)
    wait = make_attempt(
        run,
        name,
        kind="signal",
        status="running",
        finished_at=None,
        context={"signal": name, "timeout_at": (now + timedelta(hours=1)).isoformat()},
    )
    return run, wait


def blocked_run(**fields: Any) -> WorkflowRun:
    from tests.fixtures.flow_display_workflows import blocked_run_fields

    return make_run(**blocked_run_fields(**fields))


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def workflow_choice(name: str, version: str | None) -> str:
    """The start form's value for a workflow's version (None: the unversioned one)."""
    return json.dumps([name, version])
