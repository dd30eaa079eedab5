"""``manage.py demo`` (what ``make demo`` runs): the run completes, and its lines say what they measure."""

from __future__ import annotations

import io
import logging
from typing import Any

import pytest
from django.core.management import call_command

from example_project.demo.management.commands.demo import Command


@pytest.mark.django_db(transaction=True)  # an in-process worker: its threads need committed rows
def test_demo_completes_and_says_what_its_times_measure(caplog: Any) -> None:
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="django_openworkflow"):
        call_command(Command(), "--delay", "300ms", stdout=out)
    text = out.getvalue()
    assert "status:   completed" in text
    # The run's duration covers its sleep; the worker's last line measures one slice only.
    duration = next(line for line in text.splitlines() if line.startswith("duration:"))
    assert "sleeps included" in duration
    finished = [r.getMessage() for r in caplog.records if "(onboard-user) completed" in r.getMessage()]
    assert len(finished) == 1
    assert "; this slice took " in finished[0] and " completed in " not in finished[0]
    # And where to look next: the run's page in the example project's admin.
    assert "make demo-admin" in text and "/admin/django_openworkflow/workflowrun/" in text
