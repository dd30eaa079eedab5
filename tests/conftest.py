"""Fixtures: real worker subprocesses on the test database, and in-process workers."""

from __future__ import annotations

import fcntl
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from django.db import connection, connections

ROOT = Path(__file__).resolve().parent.parent


# OWF_TEST_WORKFLOW_DATABASE=other: tests/settings.py puts the workflow tables on that
# alias (with the router), and every database test may use it besides "default".
WORKFLOW_DATABASE = os.environ.get("OWF_TEST_WORKFLOW_DATABASE", "")


# Content types and permissions: made by migrate's post_migrate, and kept by every flush (its
# post_migrate would only read them back: _post_migrate_after_a_flush).
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


def _flush_by_delete(
    style: Any, connection: Any, reset_sequences: bool = True, allow_cascade: bool = False
) -> list[str]:
    """What `manage.py flush` runs after each transactional test: DELETEs, on PostgreSQL too.

    Django's flush on PostgreSQL is one TRUNCATE of every table, which makes new files for
    each table and index: 0.6 s here, against 0.02 s to DELETE the few rows a test leaves,
    and about 700 tests flush (a third of the PostgreSQL suite's time). SQLite's and
    MariaDB's flushes are DELETEs already. Tables are emptied all the same.
    """
    tables = [
        table
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False)
        if table not in KEPT_BY_FLUSH
    ]
    if connection.vendor == "postgresql" and not (reset_sequences or allow_cascade):
        # Foreign keys are checked when the flush's transaction commits, every table empty.
        return ["SET CONSTRAINTS ALL DEFERRED", *(f"DELETE FROM {connection.ops.quote_name(t)}" for t in tables)]
    return connection.ops.sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)


def _post_migrate_after_a_flush(verbosity: int, interactive: bool, db: str, **kwargs: Any) -> None:
    """post_migrate after each transactional test's flush, skipped when its receivers would write nothing.

    Django sends it after every flush so that its receivers recreate what the flush deleted.
    Here they are Django's own, which add missing content types and permissions, and the flush
    keeps both tables (KEPT_BY_FLUSH): they found every row in place and wrote nothing, for
    20-40 ms of queries after each of about 1,200 transactional tests per leg (twice on the
    leg with the workflow tables on an alias of their own). With any other receiver
    connected, the signal is sent as before.
    """
    import weakref

    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.core.management.sql import emit_post_migrate_signal
    from django.db.models.signals import post_migrate

    # Each entry's second item is the receiver, or a weak reference to it (Django 5.2 and 6).
    receivers = {entry[1]() if isinstance(entry[1], weakref.ref) else entry[1] for entry in post_migrate.receivers}
    if not receivers <= {create_contenttypes, create_permissions, None}:
        emit_post_migrate_signal(verbosity, interactive, db, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    from django.core.management.commands import flush

    flush.sql_flush = _flush_by_delete
    flush.emit_post_migrate_signal = _post_migrate_after_a_flush
    if SCOPE not in ("all", "database"):
        raise pytest.UsageError(f"OWF_TEST_SCOPE must be 'all' or 'database', not {SCOPE!r}")
    # A required database that is missing is an error, not a quiet fallback to SQLite.
    for required in ("OPENWORKFLOW_REQUIRE_POSTGRES", "OPENWORKFLOW_REQUIRE_MARIADB"):
        if os.environ.get(required) and not os.environ.get("DATABASE_URL"):
            raise pytest.UsageError(f"{required} is set but DATABASE_URL is not")
    if WORKFLOW_DATABASE:
        # Tests that replace OPENWORKFLOW wholesale (override_settings(OPENWORKFLOW={...}))
        # keep the workflow tables where they are: on "default" there are none.
        from django_openworkflow.conf import DEFAULTS

        DEFAULTS["DATABASE"] = WORKFLOW_DATABASE


# Tests that cannot hold with the workflow tables on an alias of their own, skipped in
# that mode only. STARTS_COMMIT_ON_THEIR_OWN: what openworkflow.W030 warns about (the
# start, or an atomic step's writes, commit on the workflow alias, not with a transaction
# on "default"); test_second_database.py tests the same on the workflow alias.
# DEFAULT_AS_WORKFLOW_DATABASE: the test reaches the workflow tables through the
# "default" connection (its fix: connections[owf_settings.database]).
STARTS_COMMIT_ON_THEIR_OWN = "a transaction on 'default' does not hold the workflow tables' writes (W030)"
DEFAULT_AS_WORKFLOW_DATABASE = "uses the 'default' connection for the workflow tables"
SKIPPED_WITH_A_WORKFLOW_DATABASE = {
    # The limited user is granted the default alias's tables only; its connection counts assume one database.
    **dict.fromkeys(
        (
            "tests/worker/test_connection_limits.py::"
            "test_a_worker_with_more_slots_than_connections_keeps_its_leases_and_runs_each_step_once",
            "tests/worker/test_connection_limits.py::"
            "test_a_worker_whose_heartbeat_cannot_connect_claims_nothing_until_it_can",
        ),
        "the connection-limited user reaches the default alias's database only (runs on the default alias's legs)",
    ),
    "tests/client/test_runs.py::test_run_started_in_a_rolled_back_transaction_does_not_exist": (
        STARTS_COMMIT_ON_THEIR_OWN
    ),
    "tests/engine/test_waits.py::test_signal_in_a_rolled_back_transaction_is_never_sent": STARTS_COMMIT_ON_THEIR_OWN,
    "tests/client/test_event_starts.py::test_a_rolled_back_send_starts_nothing": STARTS_COMMIT_ON_THEIR_OWN,
    "tests/test_tasks.py::test_enqueue_inside_a_rolled_back_transaction_leaves_nothing": (
        "the enqueue waits for the commit on 'default': its run is not there inside the transaction "
        "(tests/test_tasks_transactions.py)"
    ),
    "tests/dispatch/test_celery.py::test_message_is_sent_when_the_start_commits_and_not_on_rollback": (
        STARTS_COMMIT_ON_THEIR_OWN
    ),
    "tests/testing/test_testing.py::test_eager_mode_executes_nothing_when_the_start_rolls_back": (
        STARTS_COMMIT_ON_THEIR_OWN
    ),
    "tests/engine/test_atomic_steps.py::test_failed_atomic_step_rolls_its_writes_back": STARTS_COMMIT_ON_THEIR_OWN,
    "tests/engine/test_atomic_steps.py::test_killed_worker_inside_an_atomic_step_leaves_no_write": (
        STARTS_COMMIT_ON_THEIR_OWN
    ),
    "tests/store/test_conformance.py::test_check_reports_database_settings_that_would_misbehave": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/store/test_conformance.py::test_get_backend_is_the_class_for_the_database_made_once": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/definitions/test_registry.py::test_sqlite_without_wal_and_immediate_transactions_warns": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/engine/test_errors.py::test_a_write_the_database_refuses_fails_the_run_after_a_bounded_number_of_tries": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/engine/test_store_errors.py::test_failed_journal_write_aborts_the_slice_even_inside_except_exception": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/worker/test_runner.py::test_worker_whose_heartbeat_cannot_renew_abandons_its_run": (
        DEFAULT_AS_WORKFLOW_DATABASE
    ),
    "tests/admin/test_changelist.py::test_list_issues_a_constant_number_of_queries": DEFAULT_AS_WORKFLOW_DATABASE,
    "tests/store/test_notify.py::test_listener_reconnects_after_its_connection_drops": DEFAULT_AS_WORKFLOW_DATABASE,
}


def _django_db_marker(
    transaction: bool = False,
    reset_sequences: bool = False,
    databases: object = None,
    serialized_rollback: bool = False,
    available_apps: object = None,
) -> dict[str, object]:
    """The django_db marker's arguments by name (pytest-django's signature)."""
    return {
        "transaction": transaction,
        "reset_sequences": reset_sequences,
        "databases": databases,
        "serialized_rollback": serialized_rollback,
        "available_apps": available_apps,
    }


# OWF_TEST_SCOPE=database: the run is a database's second (or third) leg of the same Django, and
# runs only the tests that reach the database; the others ran, identically, on the SQLite leg.
SCOPE = os.environ.get("OWF_TEST_SCOPE", "all")
# What makes pytest-django open the test database for a test (the closure of its fixtures counts).
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "live_server", "django_db_reset_sequences", "django_db_serialized_rollback"}
)


def uses_the_database(item: pytest.Item) -> bool:
    """Whether ``item`` reaches the test database: in-process (pytest-django lets it), or through a subprocess.

    pytest-django blocks every query of a test that did not ask for the database, so a test
    that asks for none cannot touch it in-process. A test that reaches it only through a
    subprocess (a worker, ``manage.py``) says so with ``@pytest.mark.database``.
    """
    if item.get_closest_marker("django_db") or item.get_closest_marker("database"):
        return True
    if DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    test_cls = getattr(item, "cls", None)
    return bool(getattr(test_cls, "databases", None))  # Django's TestCase and TransactionTestCase


@pytest.fixture(autouse=True)
def _a_test_that_opens_the_database_says_so(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[None]:
    """A test that asks for no database but unblocks it anyway (for a subprocess) fails until it is marked.

    Unmarked, it would be deselected on the PostgreSQL and MariaDB legs and so never run there.
    """
    if uses_the_database(request.node):
        yield
        return
    unblock = django_db_blocker.unblock

    def refuse() -> None:
        raise AssertionError(
            f"{request.node.nodeid} opens the test database (django_db_blocker.unblock) but asks for none: "
            "mark it @pytest.mark.database so that it runs on every database's leg"
        )

    django_db_blocker.unblock = refuse
    try:
        yield
    finally:
        django_db_blocker.unblock = unblock


def _deselect_the_tests_without_a_database(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a database's second leg (OWF_TEST_SCOPE=database), deselect the tests that never reach it."""
    if SCOPE != "database":
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        (kept if uses_the_database(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The scope of this leg (see SCOPE), the workflow tables' alias for the database tests, then the order."""
    _deselect_the_tests_without_a_database(config, items)
    _add_the_workflow_alias(items)
    _start_each_process_with_its_share_of_the_slowest(config, items)


# The slowest tests, by node id prefix: 20-45 s each on a quiet 2-core machine, 60-200 s at a
# load of 10 (a real browser with its server and workers, a fresh virtualenv or project, pytest
# collecting in a subprocess). In file order most of them sat in one process's share of the
# suite and ran one after another at the end of each leg.
SLOWEST = (
    "tests/admin/test_browser",
    "tests/test_quickstart.py::test_the_tutorial_works",
    "tests/test_quickstart.py::test_the_readme_quickstart_works",
    "tests/test_quickstart.py::test_the_package_comes_from_the_virtualenv",
    "tests/test_user_project.py::test_pytest_passes",
    "tests/test_scope.py::",
    "tests/test_checks.py::test_the_deploy_check_reports",
    "tests/test_checks.py::test_a_partly_migrated_database",
    "tests/test_checks.py::test_tables_dropped_under_a_running_worker",
    "tests/test_release.py::test_the_sdist_and_the_wheel",
)


def _start_each_process_with_its_share_of_the_slowest(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests so that each pytest-xdist process starts with its share of SLOWEST.

    xdist's worksteal scheduler first sends each process one contiguous share of the
    collection, in order (the first ``n // processes`` tests, then a share of the rest, ...),
    and an idle process later steals from the end of a busy one's share. A slow test at the
    head of a share runs while the fast ones are stolen around it; at its end it is what the
    leg waits for. Every process collects the same items and orders them the same way, as
    xdist requires. Nothing is reordered in a run of one process.
    """
    processes = getattr(config, "workerinput", {}).get("workercount", 0)
    if processes < 2 or config.getoption("dist", None) != "worksteal":
        return
    slowest = [item for item in items if item.nodeid.startswith(SLOWEST)]
    if not slowest:
        return
    rest = iter([item for item in items if not item.nodeid.startswith(SLOWEST)])
    ordered: list[pytest.Item] = []
    unsent = len(items)
    for process in range(processes):
        share = unsent // (processes - process)  # what worksteal sends this process first
        head = slowest[process::processes]
        ordered += head
        ordered += itertools.islice(rest, max(0, share - len(head)))
        unsent -= share
    ordered += rest
    items[:] = ordered


def _add_the_workflow_alias(items: list[pytest.Item]) -> None:
    """With the workflow tables on an alias of their own, every database test may use it too.

    pytest-django creates the test databases that the collected tests ask for and
    blocks queries to any other alias, so each test's own django_db marker (or
    db/transactional_db/live_server fixture) is replaced by one naming both aliases,
    and Django test classes get the alias added to their ``databases``.
    """
    if not WORKFLOW_DATABASE:
        return
    from django.test import TransactionTestCase

    for item in items:
        reason = SKIPPED_WITH_A_WORKFLOW_DATABASE.get(item.nodeid.split("[")[0])
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"OWF_TEST_WORKFLOW_DATABASE: {reason}"))
        test_cls = getattr(item, "cls", None)
        if test_cls is not None and issubclass(test_cls, TransactionTestCase):  # Django's own test classes
            if test_cls.databases != "__all__" and WORKFLOW_DATABASE not in test_cls.databases:
                test_cls.databases = {*test_cls.databases, WORKFLOW_DATABASE}
            continue
        marker = item.get_closest_marker("django_db")
        if marker is not None:
            kwargs = _django_db_marker(*marker.args, **marker.kwargs)
        elif {"db", "transactional_db", "live_server"} & set(getattr(item, "fixturenames", ())):
            kwargs = _django_db_marker(transaction=bool({"transactional_db", "live_server"} & set(item.fixturenames)))
        else:
            continue
        databases = kwargs["databases"]
        if databases == "__all__":
            continue
        aliases = ["default"] if databases is None else list(databases)  # type: ignore[call-overload]
        kwargs["databases"] = [*aliases, *([WORKFLOW_DATABASE] if WORKFLOW_DATABASE not in aliases else [])]
        item.add_marker(pytest.mark.django_db(**kwargs), append=False)


def worker_suffix(name: str, worker: str) -> str:
    """A test database name made the xdist worker's: ``/tmp/x.sqlite3`` -> ``/tmp/x-gw0.sqlite3``, ``x`` -> ``x_gw0``"""
    if name.endswith(".sqlite3"):
        return name.removesuffix(".sqlite3") + f"-{worker}.sqlite3"
    return f"{name}_{worker}"


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix(request: pytest.FixtureRequest) -> None:
    """Each pytest-xdist worker gets test databases of its own, named so that subprocesses find them.

    Replaces pytest-django's fixture of this name, which appends ``_gw0`` to every alias's
    test database name: the "other" alias's would become ``test_x_other_gw0``, while a worker
    subprocess, given only the default alias's name (OWF_TEST_DB_NAME), looks for
    ``test_x_gw0_other`` (tests/settings.py's ``_other_name``). Here the default alias's
    name gets the suffix and the other alias's is made from it by that same rule.
    """
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if not worker:
        return
    from django.conf import settings

    from tests.settings import _other_name

    default = settings.DATABASES["default"]
    test_name = default.get("TEST", {}).get("NAME") or f"test_{default['NAME']}"
    default.setdefault("TEST", {})["NAME"] = worker_suffix(test_name, worker)
    settings.DATABASES["other"].setdefault("TEST", {})["NAME"] = _other_name(default["TEST"]["NAME"])


@pytest.fixture(scope="session", autouse=True)
def _test_database(django_db_setup: None, django_db_blocker: object) -> Iterator[None]:
    if os.environ.get("OPENWORKFLOW_REQUIRE_POSTGRES") and connection.vendor != "postgresql":
        pytest.exit("OPENWORKFLOW_REQUIRE_POSTGRES is set but the tests are not running on PostgreSQL", 2)
    # Django's vendor for MariaDB is "mysql". Asking the server which one it is would
    # need a connection, and a selection without database tests creates no test database.
    if os.environ.get("OPENWORKFLOW_REQUIRE_MARIADB") and connection.vendor != "mysql":
        pytest.exit("OPENWORKFLOW_REQUIRE_MARIADB is set but the tests are not running on MariaDB", 2)
    # Worker subprocesses are told the default alias's test database (OWF_TEST_DB_NAME) and
    # make the other alias's name from it: it must be the one this process created.
    from tests.settings import _other_name

    default, other = (connections[alias].settings_dict for alias in ("default", "other"))
    if other["NAME"] == other["TEST"]["NAME"]:  # this session made (and uses) the other alias's test database
        expected = _other_name(str(default["NAME"]))
        assert other["NAME"] == expected, f"worker subprocesses would use {expected}, not {other['NAME']}"
    yield
    # result()'s LISTEN connection must close before the test database is dropped.
    from django_openworkflow.store.notify import run_waiters

    run_waiters.close()


class WorkerProcesses:
    """Starts `manage.py runworkflows` subprocesses against the test database."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, *args: str, stderr: int | IO[bytes] | None = None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start a worker with ``args``; ``stderr=subprocess.PIPE`` to read its log (then read it, or it may block).

        ``env``: variables to set for it beside the test database's name (``DATABASE_URL`` to connect as another user).
        """
        env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]), **(env or {}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runworkflows", "--settings=tests.settings", *args],
            cwd=ROOT,
            env=env,
            stderr=stderr,
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait(10)


@pytest.fixture
def broker() -> Iterator[Any]:
    """The test Redis database (Celery's broker in tests/settings_celery.py), empty.

    Skips without Redis, unless OPENWORKFLOW_REQUIRE_REDIS says it must be there.
    """
    redis = pytest.importorskip("redis", reason="the Celery tests need Redis (celery[redis])")
    from tests import settings_celery

    client = redis.Redis.from_url(settings_celery.CELERY_BROKER_URL)
    try:
        client.ping()
    except redis.ConnectionError as exc:
        message = f"Redis is not reachable at {settings_celery.CELERY_BROKER_URL}: {exc}"
        if os.environ.get("OPENWORKFLOW_REQUIRE_REDIS"):
            pytest.fail(message)
        pytest.skip(message)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def workers() -> Iterator[WorkerProcesses]:
    pool = WorkerProcesses()
    yield pool
    pool.stop_all()


# How long a subprocess of a test (a fresh project's migrate, pytest --collect-only, a worker
# asked to stop) may take before the test calls it hung. Not a timing target: at a load of 20 on
# this project's 2-core machines a fresh migrate took over 60 s and a collection over 120 s, where
# both take seconds on a quiet machine. setup.cfg's per-test timeout (600 s) stays above it.
CEILING = 240


def wait_until(predicate: Callable[[], bool], timeout: float = CEILING, interval: float = 0.02) -> None:
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
    from django_openworkflow.worker.loop import Worker

    def run(until: Callable[[], bool] | None = None, timeout: float = CEILING, **options: object) -> Worker:
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


@pytest.fixture
def task_files_dir(tmp_path: Path) -> Iterator[Path]:
    """Human tasks' files saved to a real file storage in a directory of this test's (the default storage)."""
    from django.conf import settings
    from django.test import override_settings

    location = tmp_path / "media"
    storages = {**settings.STORAGES, "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"}}
    with override_settings(MEDIA_ROOT=str(location), STORAGES=storages):
        yield location


def files_in(location: Path) -> list[str]:
    """The files under ``location``, as paths relative to it ("openworkflow/task-files/<run>/<hex>/x.pdf")."""
    return sorted(path.relative_to(location).as_posix() for path in location.rglob("*") if path.is_file())


def race(call: Callable[[], Any], n: int = 20) -> list[Any]:
    """Run ``call()`` in ``n`` threads released at once, each on its own connections; returns the results.

    Any exception in a thread fails the test; every thread closes the connections it opened.
    """
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(call())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()  # every alias this thread opened

    threads = [threading.Thread(target=run) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert len(results) == n
    return results


@contextmanager
def built_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """Something built once per session: yields the session's shared directory and whether ``name`` is built.

    Under pytest-xdist the processes share the session's temporary root (another session has its own),
    and a lock lets one of them build while the others wait. The caller builds when it is not built yet;
    it counts as built when the block ends without an error.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    done = base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield base, done.exists()
        done.touch()
