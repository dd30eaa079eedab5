"""A user's own test suite, written as the docs' "Test your workflows" page says, passes on the suite's database.

A project made with ``django-admin startproject`` and ``startapp`` installs
the package and carries the page's samples verbatim (read from
docs/howto/testing.md, so they cannot drift): ``myapp/workflows.py``,
``myapp/views.py``, ``mysite/urls.py`` and the tests, plus a test that waits
for a result, which starts ``result()``'s listener. ``manage.py test`` and
``pytest`` (pytest-django and the package's plugin) run them in a
subprocess, on the same kind of database as this suite (a database name of
its own). Both must pass and leave no test database behind: on PostgreSQL
the listener's connection used to make DROP DATABASE fail at teardown, and
the user's CI went red although every test passed.

The page's "Two databases" tests run in the same project given a second
database, ``workflows``, as docs/howto/second-database.md sets one up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

import django_openworkflow
from tests.conftest import CEILING

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_ROOT = Path(django_openworkflow.__file__).resolve().parent.parent

# Beyond the page: a result() that waits, so the listener runs (where the database
# has one) when the test database is dropped. Run by both runners; pytest also runs
# the functions, with the plugin's workflow_runner fixture.
WAITING_TESTS = """
import threading

import pytest
from django.db import connection
from django.test import TestCase
from django_openworkflow import ResultTimeout
from django_openworkflow.testing import drain
from myapp.workflows import expense_approval


def listener_running():
    return any(thread.name == "owf-listener" for thread in threading.enumerate())


class WaitingTests(TestCase):
    def test_a_parked_run_has_no_result_yet(self):
        handle = expense_approval.run({"employee": "ada", "amount": 120})
        drain()
        with self.assertRaises(ResultTimeout):
            handle.result(timeout=0.2)  # waits, listening for the run's end meanwhile
        self.assertEqual(listener_running(), connection.vendor != "mysql")


def test_a_parked_run_waits_with_the_fixture(workflow_runner):
    handle = expense_approval.run({"employee": "ada", "amount": 120})
    workflow_runner.drain()
    with pytest.raises(ResultTimeout):
        handle.result(timeout=0.2)
    assert listener_running() == (connection.vendor != "mysql")
"""

SETTINGS = """

# Added by tests/test_user_project.py: the package, the app, and the suite's database server.
import json
import os

INSTALLED_APPS += ["django_openworkflow", "myapp"]
DATABASES = json.loads(os.environ["OWF_USER_PROJECT_DATABASES"])
if "workflows" in DATABASES:  # as docs/howto/second-database.md says
    OPENWORKFLOW = {"DATABASE": "workflows"}
    DATABASE_ROUTERS = ["django_openworkflow.routers.WorkflowRouter"]
"""

# The page's samples each project carries, and what its runners must report.
LAYOUTS: dict[str, dict[str, Any]] = {
    "one database": {
        "samples": ["myapp/tests.py", "myapp/test_eager.py", "myapp/test_fixture.py"],
        "databases": ["default"],
        "manage_py_test": "Ran 4 tests",  # TestCases: 2 in tests.py, 1 in test_eager.py, 1 in test_waiting.py
        "pytest": "6 passed",  # and a function each in test_fixture.py and test_waiting.py
    },
    "two databases": {
        "samples": ["myapp/test_two_databases.py", "myapp/test_two_databases_pytest.py"],
        "databases": ["default", "workflows"],
        "manage_py_test": "Ran 2 tests",
        "pytest": "3 passed",
    },
}


TESTING_PAGE = ROOT / "docs" / "howto" / "testing.md"


def docs_sample(path: str) -> str:
    """The ```python sample of the docs' testing page that starts with ``# <path>``, as it is printed."""
    match = re.search(rf"```python\n(# {re.escape(path)}\n.*?)```", TESTING_PAGE.read_text(), re.S)
    assert match, f"docs/howto/testing.md has no {path} sample"
    return match.group(1)


def user_database(tmp: Path, alias: str) -> dict[str, Any]:
    """A database of the suite's kind, named after the suite's test database so that parallel suites do not clash."""
    settings = connection.settings_dict
    suffix = "" if alias == "default" else f"_{alias}"
    if connection.vendor == "sqlite":
        # The suite's SQLite options, and a file, not Django's in-memory default, for the
        # test database, so that SQLite's listener runs too.
        return {
            "ENGINE": settings["ENGINE"],
            "NAME": str(tmp / f"db{suffix}.sqlite3"),
            "OPTIONS": settings["OPTIONS"],
            "TEST": {"NAME": str(tmp / f"test_db{suffix}.sqlite3")},
        }
    database = {key: settings[key] for key in ("ENGINE", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    database["NAME"] = f"{settings['NAME']}_userproject{suffix}"
    if settings.get("TEST", {}).get("CHARSET"):
        database["TEST"] = {"CHARSET": settings["TEST"]["CHARSET"]}
    return database


def user_test_database_exists(database: dict[str, Any]) -> bool:
    name = database.get("TEST", {}).get("NAME") or f"test_{database['NAME']}"
    if connection.vendor == "sqlite":
        return any(Path(name).parent.glob(f"{Path(name).name}*"))  # its -wal and -shm too
    sql = {
        "postgresql": "SELECT 1 FROM pg_database WHERE datname = %s",
        "mysql": "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(sql, [name])
        return cursor.fetchone() is not None


def drop_test_database(database: dict[str, Any]) -> None:
    """Remove what a failed run left, so that the next run starts clean."""
    if connection.vendor == "sqlite":
        return  # in the temporary directory
    name = connection.ops.quote_name(f"test_{database['NAME']}")
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")


def user_environment(project: Path) -> dict[str, str]:
    """The environment of the user's commands: none of this suite's settings, this checkout's package."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "PYTEST_", "OWF_", "OPENWORKFLOW_")) and key != "DATABASE_URL"
    }
    # This checkout's package, not whichever one the virtualenv installed.
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_ROOT), str(project)])
    return env


@pytest.fixture(scope="module", params=list(LAYOUTS))
def user_project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    project = tmp_path_factory.mktemp("user_project")
    env = user_environment(project)
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", "."], cwd=project, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "startapp", "myapp"], cwd=project, env=env, check=True)
    (project / "myapp" / "tests.py").unlink()  # startapp's empty one; the page's, where the layout has it
    with open(project / "mysite" / "settings.py", "a") as settings:
        settings.write(SETTINGS)
    layout = LAYOUTS[request.param]
    for path in ("mysite/urls.py", "myapp/workflows.py", "myapp/views.py", *layout["samples"]):
        (project / path).write_text(docs_sample(path))
    if request.param == "one database":
        (project / "myapp" / "test_waiting.py").write_text(WAITING_TESTS)
    return project, request.param


@pytest.fixture
def project_run(
    user_project: tuple[Path, str], django_db_setup: None, django_db_blocker: Any
) -> Iterator[tuple[Path, dict[str, str], dict[str, Any]]]:
    project, layout = user_project
    databases = {alias: user_database(project, alias) for alias in LAYOUTS[layout]["databases"]}
    env = user_environment(project)
    env.update(DJANGO_SETTINGS_MODULE="mysite.settings", OWF_USER_PROJECT_DATABASES=json.dumps(databases))
    with django_db_blocker.unblock():
        for database in databases.values():
            drop_test_database(database)
    try:
        yield project, env, LAYOUTS[layout]
        with django_db_blocker.unblock():
            left = [alias for alias, database in databases.items() if user_test_database_exists(database)]
        assert not left, f"the user's test database of {left} was left behind"
    finally:
        with django_db_blocker.unblock():
            for database in databases.values():
                drop_test_database(database)


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=CEILING)


@pytest.mark.database  # the user's project runs on the suite's database
def test_manage_py_test_passes(project_run: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    project, env, layout = project_run
    done = run([sys.executable, "manage.py", "test", "--noinput"], project, env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert layout["manage_py_test"] in output and "OK" in output, output


@pytest.mark.database
def test_pytest_passes(project_run: tuple[Path, dict[str, str], dict[str, Any]]) -> None:
    project, env, layout = project_run
    # pytest-django only warns when it cannot drop the test database: make that a failure.
    tests = [path for path in layout["samples"] if path.startswith("myapp/test")]
    if (project / "myapp" / "test_waiting.py").exists():
        tests.append("myapp/test_waiting.py")
    args = ["-W", "error::pytest.PytestWarning", "-p", "no:cacheprovider", *tests]
    done = run([sys.executable, "-m", "pytest", *args], project, env)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert layout["pytest"] in output, output
