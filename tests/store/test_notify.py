"""Wake-ups: workers and result() react to a commit without waiting for a poll.

PostgreSQL notifies (LISTEN/NOTIFY); SQLite's listener sees other connections'
commits (inotify on the database's directory, then PRAGMA data_version).
MySQL/MariaDB have neither: workers and waiters poll there.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time

import pytest
from django.db import connection, connections, transaction

from django_openworkflow import ResultTimeout, workflow
from django_openworkflow.conf import owf_settings
from django_openworkflow.store import get_backend
from django_openworkflow.store.notify import DUE_CHANNEL
from django_openworkflow.worker.loop import Worker
from tests.conftest import CEILING, is_parked, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import executions, record, sleeper, three_steps

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor == "mysql", reason="MySQL/MariaDB have no wake-ups: workers poll"),
]
postgres_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="LISTEN/NOTIFY is PostgreSQL only")
sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's own listener")


@pytest.fixture
def slow_polling_worker():
    # With an hour's poll (longer than any wait here), only a notification can make this worker claim.
    worker = Worker(poll_interval="1h", concurrency=4)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    yield worker
    worker.stop()
    thread.join(30)


def test_started_run_wakes_an_idle_worker(slow_polling_worker):
    first = three_steps.run()
    assert first.result(timeout=CEILING) == {"result": 11}
    second = three_steps.run()  # the worker is now idle until its next poll, in an hour
    assert second.result(timeout=CEILING) == {"result": 11}


def test_notification_is_sent_only_on_commit(slow_polling_worker):
    with transaction.atomic():
        handle = three_steps.run()
        assert connection.in_atomic_block
    assert handle.result(timeout=CEILING) == {"result": 11}


def test_retry_now_wakes_workers(slow_polling_worker):
    handle = sleeper.run({"duration": "1h"})
    wait_until(lambda: is_parked(handle), timeout=CEILING)
    assert get_backend().wake_run(handle.id) is True  # "retry now" notifies
    assert handle.result(timeout=CEILING) == "ok"


def terminate(sql_filter: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND pid <> pg_backend_pid() AND {sql_filter}"
        )
        return cursor.fetchone()[0]


@postgres_only
def test_listener_reconnects_after_its_connection_drops(slow_polling_worker):
    assert three_steps.run().result(timeout=CEILING) == {"result": 11}  # the worker is up and listening
    assert terminate("query LIKE 'LISTEN%'") >= 1
    # With an hour's poll, only a listener that came back can pick this up.
    assert three_steps.run().result(timeout=CEILING) == {"result": 11}


@workflow(name="test-drops-its-connection")
def drops_its_connection(ctx):
    def kill_own_connection():
        record(ctx, "kill")
        if executions(ctx, "kill") == 1:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return "survived"

    ctx.step.run("first", lambda: 1)
    return ctx.step.run("kill", kill_own_connection)


@postgres_only
def test_worker_releases_a_run_after_a_database_error():
    # The slot's connection dies under the step; the journal write fails, and the
    # worker hands the run back due in 1 s instead of holding it for its lease, an hour (longer than
    # any wait here: only the hand-back can have let the run finish).
    worker = Worker(poll_interval="50ms", concurrency=2, lease="1h")
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        handle = drops_its_connection.run()
        assert handle.result(timeout=CEILING) == "survived"
    finally:
        worker.stop()
        thread.join(30)
    assert SideEffect.objects.filter(run_id=handle.id, step="kill").count() == 2


def test_a_run_started_by_another_process_wakes_an_idle_worker_process(workers):
    # Another process (this one) starts the runs; the worker polls once an hour.
    workers.start("--poll", "1h", "--concurrency", "2")
    assert three_steps.run().result(timeout=CEILING) == {"result": 11}
    assert three_steps.run().result(timeout=CEILING) == {"result": 11}


def test_a_result_waiter_is_woken_by_a_commit_from_another_connection():
    from django_openworkflow.store.notify import run_waiters

    handle = sleeper.run({"duration": "1h"})
    finished = run_waiters.register(str(handle.id))
    assert finished is not None, "this database has no wake-ups for result()"
    try:
        # A commit on another connection: on SQLite any commit wakes every waiter to look
        # again; on PostgreSQL only the run's own end does.
        thread = threading.Thread(target=lambda: (get_backend().cancel_runs([handle.id]), connections.close_all()))
        thread.start()
        thread.join(15)
        assert finished.wait(15)
    finally:
        run_waiters.unregister(str(handle.id), finished)


@sqlite_only
def test_sqlite_wakes_an_idle_worker_without_inotify(monkeypatch):
    # Where inotify is missing (macOS, Windows), the listener looks at data_version every few ms.
    from django_openworkflow.store.backends import sqlite

    monkeypatch.setattr(sqlite._DirectoryWatch, "open", classmethod(lambda cls, database: None))
    worker = Worker(poll_interval="1h", concurrency=2)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        assert three_steps.run().result(timeout=CEILING) == {"result": 11}
        assert three_steps.run().result(timeout=CEILING) == {"result": 11}
    finally:
        worker.stop()
        thread.join(30)


@sqlite_only
def test_sqlite_listener_stops_promptly_while_idle():
    from django_openworkflow.store.backends.sqlite import DataVersionListener

    listener = get_backend().listener(["x"], lambda channel, payload: None)
    assert isinstance(listener, DataVersionListener)
    listener.IDLE_INTERVAL = 600  # asleep in inotify for ten minutes unless stop() wakes it
    listener.start()
    assert listener.connected.wait(10)
    time.sleep(0.1)  # let it fall asleep
    listener.stop()
    listener.join(10)
    assert not listener.is_alive()


# -- result()'s listener: started only to wait, stopped when its connection would be in the way --


@pytest.fixture
def waiters():
    from django_openworkflow.store.notify import run_waiters

    run_waiters.close()  # whatever an earlier test left running
    yield run_waiters
    run_waiters.close()


def test_a_result_that_need_not_wait_opens_no_listener(waiters):
    from django_openworkflow.testing import drain

    pending = sleeper.run({"duration": "1h"})
    with pytest.raises(ResultTimeout):
        pending.result(timeout=0)  # one read
    done = three_steps.run()
    drain()
    assert done.result(timeout=CEILING) == {"result": 11}  # finished at the first read
    assert not waiters.listening


def test_a_result_that_waits_listens(waiters):
    with pytest.raises(ResultTimeout):
        sleeper.run({"duration": "1h"}).result(timeout=0.2)
    assert waiters.listening


def listen_sessions() -> int:
    """Sessions LISTENing on the workflow tables' database (the alias "other" under make test-second-db)."""
    with connections[owf_settings.database].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%%'"
        )
        return cursor.fetchone()[0]


@postgres_only
def test_the_listener_disconnects_before_django_creates_or_drops_a_database(waiters):
    # Django's test runner and pytest-django drop the test database through a
    # connection to no database; PostgreSQL refuses while another session is in it.
    handle = sleeper.run({"duration": "1h"})
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.2)
    assert waiters.listening
    wait_until(lambda: listen_sessions() == 1, timeout=CEILING)
    with connection.creation._nodb_cursor():
        assert not waiters.listening
    wait_until(lambda: listen_sessions() == 0, timeout=CEILING)
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.2)  # the next wait starts it again
    assert waiters.listening


@pytest.mark.parametrize("setting", ["OPENWORKFLOW", "DATABASES"])
def test_the_listener_stops_when_the_database_settings_change(waiters, setting):
    from django.conf import settings
    from django.test import override_settings

    handle = sleeper.run({"duration": "1h"})
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.2)
    assert waiters.listening
    # Django warns that overriding DATABASES does not reconnect its own connections.
    warns = pytest.warns(UserWarning, match="DATABASES") if setting == "DATABASES" else contextlib.nullcontext()
    with warns, override_settings(**{setting: getattr(settings, setting)}):
        assert not waiters.listening
        with pytest.raises(ResultTimeout):
            handle.result(timeout=0.2)  # started again, with the settings of the day
        assert waiters.listening
    assert not waiters.listening


def test_a_listener_logs_a_failing_callback_and_carries_on(caplog):
    calls: list[str] = []

    def on_notify(channel: str, payload: str) -> None:
        calls.append(channel)
        if len(calls) == 1:
            raise RuntimeError("the owner's callback failed")

    listener = get_backend().listener([DUE_CHANNEL], on_notify)
    listener.start()
    try:
        # It connects again, and reports a wake-up on connecting, as after any drop.
        wait_until(lambda: len(calls) >= 2, timeout=CEILING)
        assert listener.is_alive()
        assert "the owner's callback failed" in caplog.text
        assert listener.connected.wait(10)
        seen = len(calls)
        # PostgreSQL notifies those who asked (SQLite's listener needs no asking).
        get_backend().want_wakeups(listener, DUE_CHANNEL, "test-listener", True)
        three_steps.run()  # a commit: PostgreSQL notifies, SQLite's listener sees it
        wait_until(lambda: len(calls) > seen, timeout=CEILING)
    finally:
        get_backend().want_wakeups(listener, DUE_CHANNEL, "test-listener", False)
        listener.stop()
        listener.join(10)
    assert not listener.is_alive()


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
def test_sqlite_listener_lets_go_of_a_deleted_database(tmp_path, monkeypatch, inotify):
    # Django deletes a file test database at teardown while this connection is open: it
    # must close (SQLite leaves -wal and -shm behind otherwise), create nothing, and
    # follow the database once it is back.
    from django_openworkflow.store.backends import sqlite

    if not inotify:
        monkeypatch.setattr(sqlite._DirectoryWatch, "open", classmethod(lambda cls, database: None))
    path = tmp_path / "db.sqlite3"

    def commit() -> None:
        with contextlib.closing(sqlite3.connect(path)) as other:
            other.execute("PRAGMA journal_mode=WAL")
            other.execute("CREATE TABLE IF NOT EXISTS t (x)")
            other.execute("INSERT INTO t VALUES (1)")
            other.commit()

    commit()
    wake_ups: list[str] = []
    listener = sqlite.DataVersionListener(["x"], lambda channel, payload: wake_ups.append(channel), str(path))
    listener.start()
    try:
        assert listener.connected.wait(10)
        os.remove(path)
        wait_until(lambda: not listener.connected.is_set(), timeout=CEILING)
        wait_until(lambda: not any(tmp_path.iterdir()), timeout=CEILING)
        time.sleep(0.1)
        assert not any(tmp_path.iterdir()), "the listener created the deleted database again"
        commit()
        assert listener.connected.wait(10)
        seen = len(wake_ups)
        commit()
        wait_until(lambda: len(wake_ups) > seen, timeout=CEILING)
    finally:
        listener.stop()
        listener.join(10)
    assert not listener.is_alive()
