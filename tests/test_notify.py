"""PostgreSQL LISTEN/NOTIFY: workers and result() react without waiting for a poll."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from django_openworkflow.store.runs import wake_run
from django_openworkflow.worker import Worker
from tests.conftest import is_parked, wait_until
from tests.testapp.workflows import sleeper, three_steps

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL only"),
]


@pytest.fixture
def slow_polling_worker():
    # With a 60 s poll, only a notification can make this worker claim quickly.
    worker = Worker(poll_interval="60s", concurrency=4)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    yield worker
    worker.stop()
    thread.join(30)


def test_started_run_wakes_an_idle_worker(slow_polling_worker):
    first = three_steps.run()
    assert first.result(timeout=15) == {"result": 11}
    second = three_steps.run()  # the worker is now idle until its next poll in 60 s
    assert second.result(timeout=15) == {"result": 11}


def test_notification_is_sent_only_on_commit(slow_polling_worker):
    with transaction.atomic():
        handle = three_steps.run()
        assert connection.in_atomic_block
    assert handle.result(timeout=15) == {"result": 11}


def test_retry_now_wakes_workers(slow_polling_worker):
    handle = sleeper.run({"duration": "1h"})
    wait_until(lambda: is_parked(handle), timeout=15)
    assert wake_run(handle.id) is True  # "retry now" notifies
    assert handle.result(timeout=15) == "ok"
