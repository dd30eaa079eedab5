"""Workers on a database without this app's migrations: they say what to run instead of retrying forever.

Real `manage.py runworkflows` subprocesses on a database of their own that
no migration touched yet (a new SQLite file, or a new database on the
PostgreSQL/MariaDB server the tests run on).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import DEFAULT_DB_ALIAS, DatabaseError, OperationalError, connection, connections

from django_openworkflow.checks import check_workflow_tables
from django_openworkflow.conf import owf_settings
from django_openworkflow.tables import MigrateHint, is_missing_table, migrate_command
from tests.conftest import CEILING, ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# A hung worker (the old behaviour: retry the claim forever) fails the test instead of hanging it.
GIVE_UP = CEILING
# The package's migrations, read from disk: a new one changes what the messages below count.
MIGRATIONS = sorted(path.stem for path in (ROOT / "django_openworkflow" / "migrations").glob("0*.py"))


class Fresh:
    """A database name for a subprocess's OWF_TEST_DB_NAME, with no table in it (nor in its "other" alias's)."""

    def __init__(self, tmp_path: Path) -> None:
        self.vendor = connection.vendor
        if self.vendor == "sqlite":
            self.name = str(tmp_path / "fresh.sqlite3")  # SQLite creates the files when it connects
        else:
            self.name = f"{connection.settings_dict['NAME']}_fresh"
        self.created: list[str] = []

    def create(self) -> None:
        """Create the server's databases (the default alias's and the other alias's)."""
        if self.vendor == "sqlite":
            return
        for name in (self.name, f"{self.name}_other"):
            self.drop(name)
            charset = " CHARACTER SET utf8mb4" if self.vendor == "mysql" else ""
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE DATABASE {connection.ops.quote_name(name)}{charset}")
            self.created.append(name)

    def drop(self, name: str) -> None:
        force = " WITH (FORCE)" if self.vendor == "postgresql" else ""
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(name)}{force}")

    def execute(self, *statements: str) -> None:
        """Run ``statements`` on the fresh database, through a connection of Django's backend of its own."""
        backend = type(connections[DEFAULT_DB_ALIAS])
        other = backend({**connection.settings_dict, "NAME": self.name}, alias="fresh")
        try:
            with other.cursor() as cursor:
                for sql in statements:
                    cursor.execute(sql)
        finally:
            other.close()

    def env(self, workflow_database: str = "") -> dict[str, str]:
        return {
            **os.environ,
            "OWF_TEST_DB_NAME": self.name,
            "OWF_TEST_WORKFLOW_DATABASE": workflow_database,
            "OWF_LOG_LEVEL": "INFO",
        }

    def manage(self, *args: str, workflow_database: str = "") -> subprocess.CompletedProcess[str]:
        return self.python("-m", "django", *args, "--settings=tests.settings", workflow_database=workflow_database)

    def python(self, *args: str, workflow_database: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *args],
            cwd=ROOT,
            env=self.env(workflow_database),
            capture_output=True,
            text=True,
            timeout=GIVE_UP,
        )


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[Fresh]:
    database = Fresh(tmp_path)
    database.create()
    yield database
    for name in database.created:
        database.drop(name)


class Worker:
    """A `runworkflows` subprocess whose log lines are collected as they come."""

    def __init__(self, fresh: Fresh, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runworkflows", "--settings=tests.settings", *args],
            cwd=ROOT,
            env=fresh.env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []  # appended by the reader thread only; read with list() copies
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def said(self, *words: str) -> bool:
        return any(all(word in line for word in words) for line in list(self.lines))

    def output(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


# The Celery sweep (DISPATCH = "celery") needs the test suite's Celery app loaded, as in tests/dispatch/test_celery.py.
DISPATCH_ONLY = (
    "import os; os.environ['DJANGO_SETTINGS_MODULE'] = 'tests.settings_celery'; import tests.fixtures.celery_app; "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['manage.py', 'runworkflows', '--dispatch-only'])"
)


def everything_needed() -> list[tuple[str, str]]:
    """The package's migrations and those they depend on (0010's on the user model's), as an empty database lacks."""
    from django.db.migrations.loader import MigrationLoader

    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    [leaf] = [node for node in graph.leaf_nodes() if node[0] == "django_openworkflow"]
    return graph.forwards_plan(leaf)


@pytest.mark.parametrize(
    ("workflow_database", "args"),
    [
        ("", ("-m", "django", "runworkflows", "--settings=tests.settings")),
        ("", ("-c", DISPATCH_ONLY)),
        ("other", ("-m", "django", "runworkflows", "--burst", "--settings=tests.settings")),
    ],
    ids=["default", "dispatch-only", "workflow-alias"],
)
def test_runworkflows_without_the_migrations_exits_saying_to_migrate(fresh, workflow_database, args):
    proc = fresh.python(*args, workflow_database=workflow_database)
    assert proc.returncode == 1, proc.stderr
    alias = workflow_database or "default"
    command = "manage.py migrate" if alias == "default" else f"manage.py migrate --database={alias}"
    needed = (
        f"{len(everything_needed())} migration(s) that django_openworkflow needs are not applied on database {alias!r}"
    )
    assert needed in proc.stderr
    assert f"Run `{command}` first." in proc.stderr
    assert "claim failed" not in proc.stderr


def test_a_partly_migrated_database_names_the_migrations_left(fresh):
    # Forward to the last migration and back one: 0009's reverse runs too.
    assert fresh.manage("migrate", "django_openworkflow").returncode == 0
    migrated = fresh.manage("migrate", "django_openworkflow", "0008")
    assert migrated.returncode == 0, migrated.stderr
    proc = fresh.manage("runworkflows")
    assert proc.returncode == 1
    left = [name for name in MIGRATIONS if name > "0009"]  # 0009_run_write_path and any later one
    assert (
        f"{len(left)} migration(s) that django_openworkflow needs are not applied on database 'default'" in proc.stderr
    )
    names = [f"django_openworkflow.{name}" for name in left]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")  # the first three
    assert f"{shown}. Run `manage.py migrate` first." in proc.stderr


def test_tables_dropped_under_a_running_worker_make_its_warnings_say_to_migrate(fresh):
    migrated = fresh.manage("migrate", "django_openworkflow")
    assert migrated.returncode == 0, migrated.stderr
    worker = Worker(fresh, "--poll", "50ms")
    try:
        wait_until(lambda: worker.said("worker ", "database default") or worker.proc.poll() is not None, GIVE_UP)
        assert worker.proc.poll() is None, worker.output()
        drop = {
            "sqlite": ["DROP TABLE openworkflow_run"],
            "postgresql": ["DROP TABLE openworkflow_run CASCADE"],
            # For this connection only: the tables that reference it would refuse the drop.
            "mysql": ["SET SESSION FOREIGN_KEY_CHECKS = 0", "DROP TABLE openworkflow_run"],
        }[fresh.vendor]
        fresh.execute(*drop)
        # PostgreSQL's error spans lines: the warning is read as a whole.
        hinted = re.compile(
            r"claim failed \(.*?\); retrying in \S+ -- the workflow tables are missing or not migrated "
            r"on database 'default': run `manage.py migrate`$",
            re.DOTALL | re.MULTILINE,
        )
        wait_until(lambda: hinted.search(worker.output()) is not None, GIVE_UP)
    finally:
        worker.stop()
    # A new worker on the same database does not start at all.
    proc = fresh.manage("runworkflows")
    assert proc.returncode == 1
    assert "openworkflow_run do not exist on database 'default'" in proc.stderr
    assert "are recorded as applied" in proc.stderr


def test_a_database_that_does_not_answer_yet_is_waited_for(tmp_path):
    fresh = Fresh(tmp_path)
    if fresh.vendor == "sqlite":
        fresh.name = str(tmp_path / "not-yet" / "fresh.sqlite3")  # SQLite cannot open a file in a missing directory
    worker = Worker(fresh)
    try:
        wait_until(lambda: worker.said("database 'default' did not answer") or worker.proc.poll() is not None, GIVE_UP)
        assert worker.proc.poll() is None, worker.output()
        if fresh.vendor == "sqlite":
            (tmp_path / "not-yet").mkdir()
        else:
            fresh.create()
        assert worker.proc.wait(GIVE_UP) == 1
        worker.stop()
        assert "are not applied on database 'default'" in worker.output()
    finally:
        worker.stop()
        for name in fresh.created:
            fresh.drop(name)


# -- The deployment check --


def test_the_deploy_check_reports_unapplied_migrations_and_migrate_does_not(fresh):
    check = fresh.manage("check", "--deploy", "--database", "default")
    assert "openworkflow.W080" in check.stderr
    assert "Run `manage.py migrate` first." in check.stderr
    # Not without --database (it reads the database) nor in plain `check --database`.
    assert "openworkflow.W080" not in fresh.manage("check", "--deploy").stderr
    assert "openworkflow.W080" not in fresh.manage("check", "--database", "default").stderr
    # `migrate` runs the database checks of its database: it must not warn about what it is applying.
    migrate = fresh.manage("migrate")
    assert migrate.returncode == 0, migrate.stderr
    assert "openworkflow.W080" not in migrate.stdout + migrate.stderr
    assert "openworkflow.W080" not in fresh.manage("check", "--deploy", "--database", "default").stderr


def test_the_deploy_check_passes_on_the_migrated_test_database():
    assert check_workflow_tables(databases=[owf_settings.database]) == []
    assert check_workflow_tables(databases=None) == []


def test_the_deploy_check_says_so_when_it_cannot_read_the_migrations(monkeypatch):
    """A database that is down makes a warning that names it, not a traceback out of `check`."""
    from django_openworkflow import tables

    def unreachable(alias: str) -> list[str]:
        raise OperationalError(f"could not connect to {alias}")

    monkeypatch.setattr(tables, "unapplied_migrations", unreachable)
    (message,) = check_workflow_tables(databases=[owf_settings.database])
    assert message.id == "openworkflow.W081"
    assert f"database {owf_settings.database!r}: could not connect" in message.msg


# -- The hint added to the workers' warnings --


def real_error(sql: str, using: str = DEFAULT_DB_ALIAS) -> DatabaseError:
    """The error the test database raises for ``sql``."""
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(sql)
    except DatabaseError as exc:
        return exc
    raise AssertionError(f"{sql!r} did not fail")


def rename_table(using: str, old: str, new: str) -> None:
    with connections[using].schema_editor() as editor:
        editor.execute(editor.sql_rename_table % {"old_table": old, "new_table": new})


@pytest.mark.parametrize("logger_name", ["django_openworkflow.worker", "django_openworkflow.dispatch"])
def test_a_missing_table_error_in_a_warning_gets_the_migrate_hint(caplog: Any, logger_name: str):
    alias = owf_settings.database
    # A workflow table that is not there, on the real test database: moved away for a moment.
    rename_table(alias, "openworkflow_event", "owf_moved_away")
    try:
        missing = real_error("SELECT id FROM openworkflow_event", alias)
    finally:
        rename_table(alias, "owf_moved_away", "openworkflow_event")
    yours = real_error("SELECT * FROM myapp_not_migrated")  # a table of your own: not ours to explain
    other = real_error("SELEC 1")
    assert is_missing_table(missing) and is_missing_table(yours)
    assert not is_missing_table(other)
    logger = logging.getLogger(logger_name)
    assert any(isinstance(f, MigrateHint) for f in logger.filters)  # installed when the app loaded
    with caplog.at_level(logging.WARNING, logger=logger_name):
        for error in (missing, yours, other):
            logger.warning("claim failed (%s); retrying in %.1fs", error, 0.1)
    hinted, *plain = (record.getMessage() for record in caplog.records)
    assert hinted.startswith(f"claim failed ({missing}); retrying in 0.1s -- ")
    assert hinted.endswith(f"run `{migrate_command(alias)}`")
    assert plain == [f"claim failed ({yours}); retrying in 0.1s", f"claim failed ({other}); retrying in 0.1s"]
