"""``manage.py demo``: start one onboard-user run, work it to the end in this process, print its journal."""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_openworkflow.durations import parse_duration
from django_openworkflow.models import FINISHED_STATUSES, RunStatus, StepAttempt, WorkflowRun
from django_openworkflow.worker import Worker

from ...workflows import onboard_user


def _clip(value: Any, width: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _duration(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _time(value: Any) -> str:
    return value.strftime("%H:%M:%S.%f")[:-3] if value else "-"


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
        self.stdout.write(f"\nstatus: {run.status}")
        if run.status == RunStatus.COMPLETED:
            self.stdout.write(f"output: {json.dumps(run.output)}\n")
        elif run.error:
            self.stdout.write(f"error:  {run.error.get('type')}: {run.error.get('message')}\n")
        self._print_journal(StepAttempt.objects.filter(workflow_run=run).order_by("id"))
        for child in WorkflowRun.objects.filter(parent_step_attempt__workflow_run=run):
            self.stdout.write(f"\nchild run {child.id} ({child.workflow_name}): {child.status}")
            self._print_journal(StepAttempt.objects.filter(workflow_run=child).order_by("id"))
        if run.status != RunStatus.COMPLETED:
            raise CommandError(f"run {run.id} ended {run.status}")

    def _print_journal(self, attempts: Any) -> None:
        header = ("step", "kind", "status", "started", "finished", "ms", "output")
        rows = [
            (
                a.step_name,
                a.kind,
                a.status,
                _time(a.started_at),
                _time(a.finished_at),
                f"{(a.finished_at - a.started_at).total_seconds() * 1000:.1f}"
                if a.started_at and a.finished_at
                else "-",
                _clip(a.output) if a.error is None else "error: " + _clip(a.error.get("message")),
            )
            for a in attempts
        ]
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, tuple("-" * w for w in widths), *rows]:
            cells = [
                str(c).rjust(w) if i == 5 else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            self.stdout.write("  ".join(cells).rstrip())
