"""``manage.py demo``: start one onboard-user run, work it to the end in this process, print its journal."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from django_openworkflow.durations import parse_duration
from django_openworkflow.formatting import (
    attempt_result,
    elapsed,
    error_line,
    format_duration,
    format_table,
    format_time,
    json_text,
    numbered,
    printable,
)
from django_openworkflow.models import FINISHED_STATUSES, RunStatus, StepAttempt, WorkflowRun
from django_openworkflow.worker.loop import Worker

from ...workflows import onboard_user


def _duration(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


class Command(BaseCommand):
    help = "Start one onboard-user run, execute it with an in-process worker, and print its journal."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--delay", type=_duration, default="2s", help="how long the workflow sleeps between e-mails (default 2s)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        handle = onboard_user.run({"user_id": 42, "email": "ada@example.com", "delay": options["delay"]})
        self.stdout.write(f"started run {handle.id}; working it in this process (Ctrl-C stops)...")

        Worker(poll_interval="50ms").run(
            until=lambda: handle.status() in FINISHED_STATUSES, install_signal_handlers=True
        )

        run = handle.fetch()
        self.stdout.write(f"\nstatus:   {run.status}")
        took = format_duration(elapsed(run.started_at, run.finished_at, timezone.now()))
        self.stdout.write(f"duration: {took} (the run, from its first claim to its end, sleeps included)")
        if run.status == RunStatus.COMPLETED:
            self.stdout.write(f"output:   {json_text(run.output)}")
        elif run.error:
            self.stdout.write(f"error:    {error_line(run.error)}")
        self.stdout.write("")
        self._print_journal(run)
        for child in WorkflowRun.objects.filter(parent_step_attempt__workflow_run=run).order_by("created_at"):
            self.stdout.write(f"\nchild run {child.id} ({printable(child.workflow_name)}): {child.status}")
            self._print_journal(child)
        self.stdout.write(
            "\nSee the runs in the admin: `make demo-admin` (a superuser, then runserver), then open"
            f"\n  http://127.0.0.1:8000/admin/django_openworkflow/workflowrun/{run.id}/change/"
        )
        if run.status != RunStatus.COMPLETED:
            raise CommandError(f"run {run.id} ended {run.status}")

    def _print_journal(self, run: WorkflowRun) -> None:
        """The run's step attempts in order, as ``manage.py workflows show`` prints them."""
        attempts = StepAttempt.objects.filter(workflow_run=run).order_by("id")
        now = timezone.now()
        self.stdout.write(
            format_table(
                ("step", "kind", "status", "attempt", "started", "finished", "duration", "output or error"),
                [
                    (
                        attempt.step_name,
                        attempt.kind,
                        attempt.status,
                        number,
                        format_time(attempt.started_at, precise=True, day_of=run.created_at),
                        format_time(attempt.finished_at, precise=True, day_of=run.created_at) or "-",
                        format_duration(elapsed(attempt.started_at, attempt.finished_at, run.finished_at or now)),
                        attempt_result(attempt),
                    )
                    for attempt, number in numbered(attempts)
                ],
            )
        )
