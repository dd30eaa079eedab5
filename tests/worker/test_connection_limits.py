"""More slots than the database accepts connections: the heartbeat keeps its connection, the slots are fitted.

Issue 41: 128 slots against PostgreSQL's 100 connections. Each slot kept a
connection, the heartbeat (which connected only at its first beat) found
none left, every lease ran out, another worker took the runs back and 6 %
of the step bodies ran twice. Here a database user with a small connection
limit stands in for the server's max_connections.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.db.models import Count

from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.worker.loop import Worker
from django_openworkflow.worker.runner import LeaseKeeper
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.models import SideEffect
from tests.fixtures.testapp.workflows import file_gated_step, gated_step

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "limited"


def _limited_user_name() -> str:
    """Named after this session's test database, so that parallel sessions (xdist workers) never share one."""
    return f"{connection.settings_dict['NAME']}"[:26] + "_lim"


@contextmanager
def limited_user(limit: int) -> Iterator[str]:
    """A database user allowed ``limit`` connections and the test tables' rows: the DATABASE_URL to connect as it."""
    name = _limited_user_name()
    settings = connection.settings_dict
    host, port, database = settings["HOST"] or "127.0.0.1", settings["PORT"], settings["NAME"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _drop_role(cursor, name)
            # Not a superuser: superusers are exempt from a role's CONNECTION LIMIT.
            cursor.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}' CONNECTION LIMIT {limit}")
            cursor.execute(f'GRANT USAGE ON SCHEMA public TO "{name}"')
            cursor.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{name}"')
            cursor.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{name}"')
            url = f"postgres://{name}:{PASSWORD}@{host}:{port or 5432}/{database}"
        elif connection.vendor == "mysql":
            cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")
            cursor.execute(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}' WITH MAX_USER_CONNECTIONS {limit}")
            cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{database}`.* TO '{name}'@'%'")
            url = f"mysql://{name}:{PASSWORD}@{host}:{port or 3306}/{database}"
        else:
            pytest.skip("SQLite has no connections to limit")
    try:
        yield url
    finally:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                _drop_role(cursor, name)
            else:
                cursor.execute(f"DROP USER IF EXISTS '{name}'@'%'")


def _drop_role(cursor: Any, name: str) -> None:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name])
    if cursor.fetchone():
        cursor.execute(f'DROP OWNED BY "{name}"')  # its privileges on this database's tables
        cursor.execute(f'DROP ROLE "{name}"')


def test_a_worker_with_more_slots_than_connections_keeps_its_leases_and_runs_each_step_once(workers, tmp_path):
    """12 slots for a user allowed 8 connections: the heartbeat renews throughout, no step body runs twice.

    Without the fix the slots took every connection, the heartbeat could not
    open one, and the worker stopped unhealthy with its leases lapsing.
    """
    gate = tmp_path / "gate"
    handles = [file_gated_step.run({"gate": str(gate)}) for _ in range(12)]
    log = tmp_path / "worker.log"
    with limited_user(8) as url, log.open("wb") as stderr:
        proc = workers.start(
            "--concurrency", "12", "--lease", "4s", "--poll", "20ms", stderr=stderr, env={"DATABASE_URL": url}
        )
        # Steps hold their slots until the gate opens: the heartbeat must renew their leases meanwhile.
        wait_until(lambda: SideEffect.objects.filter(step="gated").exists(), timeout=CEILING)
        held = SideEffect.objects.filter(step="gated").values_list("run_id", flat=True).first()
        first_end = WorkflowRun.objects.values_list("available_at", flat=True).get(id=held)

        def renewed_twice() -> bool:
            # The lease's end while the worker holds the run, pushed a lease/3 further by each renewal.
            # (A run handed back has no worker: its new available_at is no renewal.)
            lease_end, holder = WorkflowRun.objects.values_list("available_at", "worker_id").get(id=held)
            text = log.read_text()
            assert proc.poll() is None, "the worker stopped: " + text
            # Once it fails, a worker stops as soon as the lease lapses, then drains with the heartbeat still trying.
            assert "heartbeat failed" not in text and "stopping this worker" not in text, text
            return holder is not None and lease_end - first_end >= timedelta(seconds=2)

        wait_until(renewed_twice, timeout=CEILING)
        gate.touch()
        wait_until(lambda: WorkflowRun.objects.filter(status="completed").count() == 12, timeout=CEILING)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(CEILING) == 0
    text = log.read_text()
    # Fitted to what the database accepts, and said so at start.
    assert "slot(s) instead of 12: the database accepts" in text, text
    limit = "the role's CONNECTION LIMIT is 8" if connection.vendor == "postgresql" else "max_user_connections is 8"
    assert limit in text, text
    assert "heartbeat failed" not in text and "could not open its database connection" not in text, text
    per_run = SideEffect.objects.filter(step="gated").values("run_id").annotate(n=Count("id"))
    assert sorted(row["n"] for row in per_run) == [1] * 12  # each step body ran once
    assert all(h.result(timeout=0) == "done" for h in handles)


@contextmanager
def connections_as(url_user: str, count: int) -> Iterator[None]:
    """Hold ``count`` connections to the test database as the user the limited_user URL names."""
    from django.db.utils import load_backend

    settings = {**connection.settings_dict, "USER": url_user, "PASSWORD": PASSWORD}
    held = [load_backend(settings["ENGINE"]).DatabaseWrapper(settings, f"held-{i}") for i in range(count)]
    try:
        for wrapper in held:
            wrapper.ensure_connection()
        yield
    finally:
        for wrapper in held:
            wrapper.close()


def test_a_worker_whose_heartbeat_cannot_connect_claims_nothing_until_it_can(workers, tmp_path):
    """No connection left for the heartbeat: it says so and nothing is claimed; once one frees, the run runs."""
    gate = tmp_path / "gate"
    gate.touch()
    handle = file_gated_step.run({"gate": str(gate)})
    log = tmp_path / "worker.log"
    with limited_user(6) as url, log.open("wb") as stderr:
        # All but one: runworkflows's main thread takes that one (it looks for the migrations first) and keeps it.
        with connections_as(_limited_user_name(), 5):
            proc = workers.start("--lease", "4s", "--poll", "20ms", stderr=stderr, env={"DATABASE_URL": url})
            refused = "the heartbeat could not open its database connection"
            wait_until(lambda: refused in log.read_text(), timeout=CEILING)
            assert handle.status() == "pending"  # the worker claims nothing before its heartbeat has a connection
        assert handle.result(timeout=CEILING) == "done"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(CEILING) == 0


def test_the_database_says_how_many_more_connections_it_accepts():
    room = get_backend().connection_room()
    if connection.vendor == "sqlite":
        assert room is None
        return
    assert room is not None and room.limit > 0 and room.free < room.limit  # this test's connection counts


def test_a_heartbeat_that_cannot_renew_says_so_loudly(caplog):
    """An ERROR that says what is at stake: the runs' steps will run again elsewhere unless a renewal lands."""
    backend = get_backend()
    gated_step.run({})
    (claimed,) = backend.claim("w", 1, timedelta(seconds=30))
    keeper = LeaseKeeper(backend, "w", timedelta(seconds=30))
    renewed: list[int | None] = []
    connected, cut = threading.Event(), threading.Event()
    wrappers: list[Any] = []

    def renew_on_a_severed_connection() -> None:
        # On a thread of its own, as the heartbeat's: its connection, ended by the server, fails the renewal.
        try:
            wrapper = connections[backend.alias]
            wrapper.ensure_connection()
            wrappers.append(wrapper)
            connected.set()
            cut.wait(30)
            renewed.append(keeper.renew([claimed]))
        finally:
            connections.close_all()

    with caplog.at_level("ERROR", logger="django_openworkflow.worker"):
        thread = threading.Thread(target=renew_on_a_severed_connection)
        thread.start()
        assert connected.wait(30)
        (wrapper,) = wrappers
        _end_connection(wrapper)
        cut.set()
        thread.join(60)
    assert renewed == [None]
    (record,) = [r for r in caplog.records if "heartbeat failed" in r.getMessage()]
    assert record.levelname == "ERROR"
    assert "could not renew the leases of 1 run(s)" in record.getMessage()
    assert "other workers take them over and run the steps in progress again" in record.getMessage()


def _end_connection(wrapper: Any) -> None:
    """What a server restart or a killed session does to one connection (SQLite has no server: closed under it)."""
    if wrapper.vendor == "sqlite":
        wrapper.connection.close()
        return
    with connection.cursor() as cursor:
        if wrapper.vendor == "postgresql":
            cursor.execute("SELECT pg_terminate_backend(%s)", [wrapper.connection.info.backend_pid])
        else:
            cursor.execute("KILL %s", [wrapper.connection.thread_id()])


def test_the_heartbeat_opens_its_connection_before_any_slot_starts(monkeypatch):
    """The order that keeps a worker with too many slots safe: the heartbeat's connection first, then the slots."""
    worker = Worker(concurrency=2, lease="30s", poll_interval="20ms")
    opened: list[tuple[str, int]] = []
    real = worker.store.open_connection

    def open_connection() -> None:
        with worker._lock:
            slots = len(worker._slot_threads)
        opened.append((threading.current_thread().name, slots))
        real()

    def slots_started() -> bool:
        with worker._lock:
            return bool(worker._slot_threads)

    monkeypatch.setattr(worker.store, "open_connection", open_connection)
    worker.run(until=slots_started, install_signal_handlers=False)
    assert opened[0] == ("owf-heartbeat", 0)


def test_a_heartbeat_connection_refused_by_a_setting_stops_the_worker(caplog, monkeypatch):
    """Not the database's state but a setting: trying again cannot mend it, so the worker stops, with the reason."""
    from django.core.exceptions import ImproperlyConfigured

    from django_openworkflow.worker.loop import WorkerUnhealthy

    worker = Worker(concurrency=1, lease="30s", poll_interval="20ms")

    def open_connection() -> None:
        raise ImproperlyConfigured("settings.DATABASES is improperly configured")

    monkeypatch.setattr(worker.store, "open_connection", open_connection)
    give_up = time.monotonic() + CEILING
    with caplog.at_level("ERROR", logger="django_openworkflow.worker"), pytest.raises(WorkerUnhealthy):
        worker.run(until=lambda: time.monotonic() > give_up, install_signal_handlers=False)
    assert time.monotonic() < give_up  # it stopped by itself, not at the deadline
    (record,) = [r for r in caplog.records if "could not open its database connection" in r.getMessage()]
    assert record.exc_info is not None and "improperly configured" in str(record.exc_info[1])
