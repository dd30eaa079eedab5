"""No step starts without a lease: a worker whose heartbeats cannot land stops its runs."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections

from django_openworkflow.engine.execute import Outcome, execute_slice
from django_openworkflow.models import StepAttempt
from django_openworkflow.store import get_backend
from django_openworkflow.worker import Worker
from tests.conftest import wait_until
from tests.testapp.models import SideEffect
from tests.testapp.workflows import slow_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_slice_stops_before_the_next_step_when_the_lease_is_not_valid():
    handle = slow_steps.run({"steps": 3, "pause": 0})
    (claimed,) = get_backend().claim("w", 1, timedelta(seconds=30))
    checks = []

    def lease_valid():
        checks.append(1)
        return len(checks) < 2  # valid for the first step only

    assert execute_slice(claimed, lease_valid).outcome == Outcome.LEASE_LOST
    assert SideEffect.objects.filter(run_id=handle.id).count() == 1
    assert not StepAttempt.objects.exists()  # nothing was written without a lease


def lock_everything_for(run_id, seconds, locked):
    """From another connection, block every write to the run for ``seconds``."""
    conn = connections.create_connection("default")
    try:
        conn.set_autocommit(False)
        with conn.cursor() as cursor:
            if conn.vendor == "postgresql":
                cursor.execute("SELECT 1 FROM openworkflow_run WHERE id = %s FOR UPDATE", [run_id])
            else:
                cursor.execute("UPDATE openworkflow_run SET updated_at = updated_at WHERE id = %s", [run_id.hex])
            locked.set()
            time.sleep(seconds)
        conn.rollback()
    finally:
        conn.close()


def test_worker_whose_heartbeat_cannot_renew_abandons_its_run(caplog):
    handle = slow_steps.run({"steps": 2, "pause": 1.5})
    worker = Worker(concurrency=1, lease="1s", poll_interval="20ms")
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    with caplog.at_level("WARNING", logger="django_openworkflow.worker"):
        thread.start()
        try:
            wait_until(lambda: SideEffect.objects.filter(run_id=handle.id).exists())
            locked = threading.Event()
            blocker = threading.Thread(target=lock_everything_for, args=(handle.id, 2.0, locked))
            blocker.start()
            locked.wait(5)
            blocker.join()
            assert handle.result(timeout=30) == "done"
        finally:
            worker.stop()
            thread.join(30)
    # The first slice could not renew its lease during step one, so it gave up
    # instead of starting step two; a later claim finished the run.
    assert "lease-lost" in caplog.text
