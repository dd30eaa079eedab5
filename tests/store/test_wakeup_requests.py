"""PostgreSQL notifies only those who asked (migration 0009): no NOTIFY, no server-wide commit lock, otherwise.

A worker asks for ``openworkflow_due`` while it waits with free slots; a
``handle.result()`` asks for ``openworkflow_done`` of its own run. The requests
are rows of ``openworkflow_wakeup``, read by the run table's deferred trigger.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection, connections, transaction

from django_openworkflow.conf import owf_settings
from django_openworkflow.store import get_backend
from django_openworkflow.store.notify import DONE_CHANNEL, DUE_CHANNEL, run_waiters
from django_openworkflow.testing import drain
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.workflows import three_steps

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="only PostgreSQL notifies (LISTEN/NOTIFY)"),
]


def _connect() -> psycopg.Connection:
    params = connections[owf_settings.database].get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold", "server_side_binding"):
        params.pop(key, None)
    return psycopg.connect(**params, autocommit=True)


class Listening:
    """A LISTEN connection on both channels; ``backend_pid`` as the store's listeners have it."""

    def __init__(self) -> None:
        self.conn = _connect()
        self.conn.execute(f'LISTEN "{DUE_CHANNEL}"')
        self.conn.execute(f'LISTEN "{DONE_CHANNEL}"')
        self.backend_pid = self.conn.info.backend_pid

    def received(self) -> list[tuple[str, str]]:
        # A round trip delivers what was sent before it; nothing is waited for.
        self.conn.execute("SELECT 1")
        return [(note.channel, note.payload) for note in self.conn.notifies(timeout=0.2, stop_after=100)]


@pytest.fixture(autouse=True)
def no_requests() -> None:
    # Not a model: Django's flush between tests leaves the table alone.
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("DELETE FROM openworkflow_wakeup")


@pytest.fixture
def listening() -> Iterator[Listening]:
    listener = Listening()
    yield listener
    listener.conn.close()


def requests() -> list[tuple[str, str]]:
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("SELECT channel, key FROM openworkflow_wakeup ORDER BY channel, key")
        return list(cursor.fetchall())


def test_nobody_asked_nothing_is_notified(listening: Listening) -> None:
    handle = three_steps.run()
    drain()
    assert handle.fetch().status == "completed"
    assert listening.received() == []


def test_a_due_request_notifies_new_runs_until_withdrawn(listening: Listening) -> None:
    backend = get_backend()
    assert backend.want_wakeups(listening, DUE_CHANNEL, "worker-a", True) is True
    three_steps.run()
    assert listening.received() == [(DUE_CHANNEL, "")]
    assert backend.want_wakeups(listening, DUE_CHANNEL, "worker-a", False) is True
    three_steps.run()
    assert listening.received() == []


def test_a_done_request_notifies_that_run_only(listening: Listening) -> None:
    waited, other = three_steps.run(), three_steps.run()
    assert get_backend().want_wakeups(listening, DONE_CHANNEL, str(waited.id), True) is True
    drain()
    assert listening.received() == [(DONE_CHANNEL, str(waited.id))]
    assert other.fetch().status == "completed"


def test_the_trigger_looks_at_commit_not_at_insert(listening: Listening) -> None:
    # A transaction starts a run; a worker asks before it commits: the commit still wakes it.
    with transaction.atomic(using=owf_settings.database):
        three_steps.run()
        other = _connect()
        try:
            other.execute(
                "INSERT INTO openworkflow_wakeup (channel, key, pid) VALUES (%s, 'late-worker', %s)",
                (DUE_CHANNEL, listening.backend_pid),
            )
        finally:
            other.close()
    assert listening.received() == [(DUE_CHANNEL, "")]


def test_requests_of_a_gone_connection_are_dropped_by_the_next_one(listening: Listening) -> None:
    gone = Listening()
    assert get_backend().want_wakeups(gone, DUE_CHANNEL, "crashed-worker", True) is True
    gone.conn.close()
    wait_until(lambda: not _pid_alive(gone.backend_pid), timeout=CEILING)
    assert get_backend().want_wakeups(listening, DUE_CHANNEL, "live-worker", True) is True
    assert requests() == [(DUE_CHANNEL, "live-worker")]


def _pid_alive(pid: int) -> bool:
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return bool(cursor.fetchone()[0])


def test_inside_a_transaction_nothing_is_asked(listening: Listening) -> None:
    # Nobody would see the request before the commit: the caller is told to poll.
    with transaction.atomic(using=owf_settings.database):
        assert get_backend().want_wakeups(listening, DONE_CHANNEL, "some-run", True) is None
    assert requests() == []


def test_result_asks_for_its_run_and_withdraws_after() -> None:
    handle = three_steps.run()
    seen: list[list[tuple[str, str]]] = []

    def worker() -> None:
        wait_until(lambda: (DONE_CHANNEL, str(handle.id)) in requests(), timeout=CEILING)
        seen.append(requests())
        drain()
        connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    assert handle.result(timeout=CEILING) == {"result": 11}
    thread.join(30)
    assert seen == [[(DONE_CHANNEL, str(handle.id))]]
    assert requests() == []
    run_waiters.close()


def test_a_result_woken_before_its_run_finished_polls_and_withdraws_its_request() -> None:
    """A wake-up before the run has finished (the listener stopped, or woke it early) ends the listening.

    The waiter polls from then on, and withdraws its request as it stops listening: left behind,
    the request would make every commit of the run notify nobody until the connection closed.
    """
    handle = three_steps.run()
    results: list[object] = []

    def wait_for_result() -> None:
        try:
            results.append(handle.result(timeout=CEILING))
        finally:
            connections.close_all()

    thread = threading.Thread(target=wait_for_result)
    thread.start()
    try:
        wait_until(lambda: (DONE_CHANNEL, str(handle.id)) in requests(), timeout=CEILING)
        run_waiters._dispatch(DONE_CHANNEL, str(handle.id))  # as the listener wakes it; the run is still pending
        wait_until(lambda: requests() == [], timeout=CEILING)  # withdrawn while the run is still unfinished
        drain()
    finally:
        thread.join(60)
    assert results == [{"result": 11}]
    assert requests() == []
    run_waiters.close()


def test_an_idle_worker_asks_and_withdraws_when_it_stops() -> None:
    worker = Worker(poll_interval="1h", concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        wait_until(lambda: requests() == [(DUE_CHANNEL, worker.worker_id)], timeout=CEILING)
        # Asked: a new run is picked up at once, not at the hourly poll.
        assert three_steps.run().result(timeout=CEILING) == {"result": 11}
    finally:
        worker.stop()
        thread.join(30)
    assert requests() == []
