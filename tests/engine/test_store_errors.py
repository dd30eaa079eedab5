"""When the engine's own journal write fails, user code cannot swallow it and carry on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection

from django_openworkflow import workflow
from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt
from django_openworkflow.store import get_backend

pytestmark = pytest.mark.django_db(transaction=True)
continued_after_failure: list[str] = []


def set_read_only(on: bool) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET default_transaction_read_only = {'on' if on else 'off'}")
        elif connection.vendor == "mysql":
            cursor.execute(f"SET SESSION TRANSACTION {'READ ONLY' if on else 'READ WRITE'}")
        else:
            cursor.execute(f"PRAGMA query_only = {'ON' if on else 'OFF'}")


@workflow(name="test-swallows-store-error")
def swallows_store_error(ctx):
    ctx.step.run("a", lambda: 1)
    ctx.step.run("read-only", lambda: set_read_only(True))  # the next journal write will fail
    try:
        ctx.step.run("b", lambda: 2)
    except Exception:
        continued_after_failure.append("b")
        return "swallowed"
    return "ok"


def test_failed_journal_write_aborts_the_slice_even_inside_except_exception():
    continued_after_failure.clear()
    handle = swallows_store_error.run()
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    try:
        # Transient (the connection or a lock: SQLite, MariaDB) is raised for the
        # worker to release the run; anything else (PostgreSQL's read-only error)
        # is the engine's to handle: the run is handed back with a note.
        outcome = execute_slice(get_backend(), claimed).outcome
    except DatabaseError as exc:
        assert get_backend().is_transient(exc)
    else:
        assert outcome == Outcome.RELEASED
    finally:
        set_read_only(False)
    assert continued_after_failure == []
    assert handle.status() == "running"  # the worker releases it for a retry; nothing half-written
    journal = list(StepAttempt.objects.order_by("id").values_list("step_name", "status"))
    assert journal == [("a", "completed"), ("read-only", "running")]
