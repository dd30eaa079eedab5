"""Scheduled workflows of ``tests/test_schedules.py``, and a worker process that declares them.

Declared by calling :func:`declare` (a fixture does, and takes them back
after), not at import: every worker of every other test would otherwise
start their runs. ``python -m tests.schedule_workflows [runworkflows
options]`` is ``manage.py runworkflows`` with :data:`EVERY_TWO_SECONDS`
declared, for the real-clock test.
"""

from __future__ import annotations

import os
import sys

from django_openworkflow import WorkflowSpec, workflow
from django_openworkflow.definitions.flow import Schedule

EVERY_MINUTE = "sched-every-minute"
SKIPPING = "sched-skip"
PARIS = "sched-paris"
EVERY_TWO_SECONDS = "sched-every-2s"
EVERY_TWO_SECONDS_CRON = "* * * * * */2"  # croniter reads a sixth field as the seconds


def declare() -> list[WorkflowSpec]:
    """Register the in-process test schedules; returns their specs (to unregister)."""

    @workflow(name=EVERY_MINUTE, schedule=Schedule("* * * * *", timezone="UTC", input={"hello": "world"}))
    def every_minute(ctx):
        return ctx.input

    @workflow(name=SKIPPING, schedule=Schedule("* * * * *", timezone="UTC", missed="skip"))
    def skipping(ctx):
        return None

    @workflow(name=PARIS, schedule=Schedule("0 2 * * *", timezone="Europe/Paris"))
    def paris(ctx):
        return None

    return [every_minute, skipping, paris]


def declare_real_clock() -> WorkflowSpec:
    @workflow(name=EVERY_TWO_SECONDS, schedule=EVERY_TWO_SECONDS_CRON)
    def every_two_seconds(ctx):
        return None

    return every_two_seconds


if __name__ == "__main__":
    import django
    from django.core.management import call_command

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()
    declare_real_clock()
    call_command("runworkflows", *sys.argv[1:])
