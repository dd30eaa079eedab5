"""Fixtures: real worker subprocesses on the test database, and in-process workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    # A required database that is missing is an error, not a quiet fallback to SQLite.
    for required in ("OPENWORKFLOW_REQUIRE_POSTGRES", "OPENWORKFLOW_REQUIRE_MARIADB"):
        if os.environ.get(required) and not os.environ.get("DATABASE_URL"):
            raise pytest.UsageError(f"{required} is set but DATABASE_URL is not")


@pytest.fixture(scope="session", autouse=True)
def _test_database(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    if os.environ.get("OPENWORKFLOW_REQUIRE_POSTGRES") and connection.vendor != "postgresql":
        pytest.exit("OPENWORKFLOW_REQUIRE_POSTGRES is set but the tests are not running on PostgreSQL", 2)
    # Django's vendor for MariaDB is "mysql". Asking the server which one it is would
    # need a connection, and a selection without database tests creates no test database.
    if os.environ.get("OPENWORKFLOW_REQUIRE_MARIADB") and connection.vendor != "mysql":
        pytest.exit("OPENWORKFLOW_REQUIRE_MARIADB is set but the tests are not running on MariaDB", 2)
    yield
    # result()'s LISTEN connection must close before the test database is dropped.
    from django_openworkflow.store.notify import run_waiters

    run_waiters.close()


class WorkerProcesses:
    """Starts `manage.py runworkflows` subprocesses against the test database."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runworkflows", "--settings=tests.settings", *args],
            cwd=ROOT,
            env=env,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def workers() -> Iterator[WorkerProcesses]:
    pool = WorkerProcesses()
    yield pool
    pool.stop_all()


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0, interval: float = 0.02) -> None:
    """Poll until ``predicate()`` is true; fail the test after ``timeout`` seconds."""
    give_up = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > give_up:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def is_parked(handle: object) -> bool:
    """Parked (running, no worker), read in ONE query: a pending run has no worker either."""
    return bool(handle.fetch().is_parked)  # type: ignore[attr-defined]


@pytest.fixture
def run_worker() -> Callable[..., None]:
    """Run an in-process Worker until ``until()`` is true (or burst work is done)."""
    from django_openworkflow.worker import Worker

    def run(until: Callable[[], bool] | None = None, timeout: float = 30.0, **options: object) -> Worker:
        options.setdefault("poll_interval", "10ms")
        worker = Worker(burst=until is None, **options)  # type: ignore[arg-type]
        give_up = time.monotonic() + timeout
        timer_hit = threading.Event()

        def stop_condition() -> bool:
            if time.monotonic() > give_up:
                timer_hit.set()
                return True
            return until() if until is not None else False

        worker.run(until=stop_condition, install_signal_handlers=False)
        if timer_hit.is_set():
            raise AssertionError(f"worker did not finish within {timeout}s")
        return worker

    return run
