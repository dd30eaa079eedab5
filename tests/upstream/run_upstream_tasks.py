"""Django's own Tasks tests (``tests/tasks/`` of the installed Django) against WorkflowBackend.

    python tests/upstream/run_upstream_tasks.py        # or: make test-upstream

Downloads the sdist of the installed Django through pip (its configured
index) into ``build/upstream/``, extracts ``tests/tasks/`` there, and
rewrites the backends it names: Django's dummy backend becomes
:class:`tests.upstream.backends.DummyWorkflowBackend` (runs nobody
executes), its immediate backend :class:`ImmediateWorkflowBackend` (the
enqueue returns once a real ``runworkflows`` process has executed the run).
``SimpleTestCase`` is given the database: the runs commit, so the worker
sees them, and no table is flushed between tests (the dummy's ``clear()``
deletes its runs). Nothing of Django's is copied into the
repository. Two pytest runs, on the database ``DATABASE_URL`` names
(SQLite without it): the modules that use the dummy backend, with no
worker, then the immediate backend's, with one.

Django 5.2 has no ``tests/tasks/``. There the script looks in the sdists of
the installed ``django-tasks`` backport (and ``django-tasks-db``, when
installed) for a suite to run, says what it found and exits 0: django-tasks
0.12.0 ships no tests; django-tasks-db 0.13.0 ships ``tests/tests.py``,
which tests its own ``DatabaseBackend`` and ``db_worker`` and imports a
``tests/tasks.py`` and settings the sdist does not carry, so it cannot run.
A release that ships a runnable suite is reported, for wiring in here.

Every upstream test skipped here is in :data:`SKIPPED`, with its reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "upstream"

DUMMY_STORAGE = "tests the dummy backend's own storage or class"
IMMEDIATE_ONLY = "tests what only an in-process backend does"
IN_THE_WORKER = (
    "asserts log records of the task's execution in the test process: it runs in the runworkflows "
    "process, which logs them (tests/test_tasks.py checks ours)"
)
NO_WORKER_HERE = "enqueues on the immediate backend; this module runs without a worker (the dummy's runs stay READY)"
CUSTOM = "tests BaseTaskBackend subclasses of its own, not a backend under test"

SKIPPED: dict[str, str] = {
    # test_custom_backend.py: backends the test module defines.
    "test_custom_backend.py": CUSTOM,
    # test_dummy_backend.py
    "test_dummy_backend.py::DummyBackendTestCase::test_using_correct_backend": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTestCase::test_exceptions": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTestCase::test_clear": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTestCase::test_get_result_from_different_request": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTestCase::test_refresh_result_async": DUMMY_STORAGE,
    "test_dummy_backend.py::DummyBackendTransactionTestCase": (
        "the dummy's enqueue waits for on_commit; a run is part of the transaction (tests/test_tasks.py)"
    ),
    # test_tasks.py
    "test_tasks.py::TaskTestCase::test_using_correct_backend": DUMMY_STORAGE,
    "test_tasks.py::TaskTestCase::test_get_backend": DUMMY_STORAGE,
    "test_tasks.py::TaskTestCase::test_task_error_invalid_exception": NO_WORKER_HERE,
    "test_tasks.py::TaskTestCase::test_task_error_unknown_module": NO_WORKER_HERE,
    # test_immediate_backend.py
    "test_immediate_backend.py::ImmediateBackendTestCase::test_using_correct_backend": DUMMY_STORAGE,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_get_result": (
        "WorkflowBackend supports get_result"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_refresh_result": (
        "WorkflowBackend supports get_result"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_cannot_pass_run_after": (
        "WorkflowBackend supports run_after"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_throws_keyboard_interrupt": (
        "the task runs in another process: its KeyboardInterrupt cannot reach the enqueuing one"
    ),
    "test_immediate_backend.py::ImmediateBackendTestCase::test_catches_exception": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_complex_exception": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_complex_return_value": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_enqueue_logs": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_failed_logs": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTestCase::test_successful_task_no_none_in_logs": IN_THE_WORKER,
    "test_immediate_backend.py::ImmediateBackendTransactionTestCase": (
        IMMEDIATE_ONLY + ": executing inside the enqueuing transaction (a durable run starts after the commit)"
    ),
}

WITHOUT_WORKER = ["test_dummy_backend.py", "test_tasks.py"]
WITH_WORKER = ["test_immediate_backend.py"]

CONFTEST = '''
"""Written by tests/upstream/run_upstream_tasks.py: the skips, and a runworkflows worker when asked."""

import os
import re
import subprocess
import sys

import pytest

SKIPPED = {skipped!r}


def pytest_configure(config):
    from django.test import SimpleTestCase

    SimpleTestCase.databases = {{"default"}}


def pytest_collection_modifyitems(items):
    for item in items:
        nodeid = item.nodeid.split("tasks/", 1)[-1]
        for key, reason in SKIPPED.items():
            if nodeid == key or nodeid.startswith(key + "::"):
                item.add_marker(pytest.mark.skip(reason="upstream: " + reason))


@pytest.fixture(scope="session", autouse=True)
def runworkflows(django_db_setup, django_db_blocker):
    if not os.environ.get("OWF_UPSTREAM_WORKER"):
        yield None
        return
    from django.db import connection

    env = dict(os.environ, OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]))
    log = open("runworkflows.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "runworkflows", "--settings=tests.upstream.settings", "--concurrency", "4"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    yield proc
    proc.terminate()
    proc.wait(30)
    log.close()
'''


def django_tests(version: str) -> Path:
    """``build/upstream/django-<version>/``, holding the rewritten ``tasks/`` package."""
    archive_path = sdist("django", version)
    target = CACHE / f"django-{version}"
    package = target / "tasks"
    if not package.exists():
        prefix = f"django-{version}/tests/tasks/"
        with tarfile.open(archive_path) as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(prefix) and m.isfile()]
            if not members:
                raise SystemExit(f"{archive_path.name} has no {prefix}")
            for member in members:
                data = archive.extractfile(member)
                assert data is not None
                path = package / member.name.removeprefix(prefix)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(rewrite(data.read().decode()))
    (target / "conftest.py").write_text(textwrap.dedent(CONFTEST.format(skipped=SKIPPED)).lstrip())
    (target / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = tests.upstream.settings\n")
    return target


def rewrite(source: str) -> str:
    source = source.replace("django.tasks.backends.dummy.DummyBackend", "tests.upstream.backends.DummyWorkflowBackend")
    source = source.replace(
        "django.tasks.backends.immediate.ImmediateBackend", "tests.upstream.backends.ImmediateWorkflowBackend"
    )
    return source


def sdist(project: str, version: str) -> Path:
    """The sdist of ``project==version``, downloaded through pip into ``build/upstream/`` once."""
    found = sorted(CACHE.glob(f"{project.replace('-', '_')}-{version}.tar.gz"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps"]
            + ["--dest", str(CACHE), f"{project}=={version}"],
            check=True,
        )
        found = sorted(CACHE.glob(f"{project.replace('-', '_')}-{version}.tar.gz"))
    return found[0]


def backport_suites() -> None:
    """Django 5.2: what the installed backports' sdists hold to run (nothing, as of django-tasks 0.12.0)."""
    from importlib.metadata import PackageNotFoundError, version

    for project in ("django-tasks", "django-tasks-db"):
        try:
            installed = version(project)
        except PackageNotFoundError:
            continue
        with tarfile.open(sdist(project, installed)) as archive:
            names = {member.name.split("/", 1)[-1] for member in archive.getmembers() if member.isfile()}
            tests = sorted(name for name in names if name.startswith("tests/") and name.endswith(".py"))
            # The test modules' own imports from the tests package ("from tests import tasks").
            wanted = set()
            for name in tests:
                data = archive.extractfile(f"{project.replace('-', '_')}-{installed}/{name}")
                assert data is not None
                wanted |= set(re.findall(r"^from tests(?:\.(\w+))? import (\w+)", data.read().decode(), re.M))
        missing = sorted(
            f"tests/{module or name}.py"
            for module, name in wanted
            if f"tests/{module or name}.py" not in names and f"tests/{module or name}/__init__.py" not in names
        )
        if not tests:
            print(f"{project} {installed}: its sdist ships no tests; nothing to run")
        elif missing:
            print(f"{project} {installed}: its tests import {', '.join(missing)}, which its sdist does not ship")
        else:
            print(f"{project} {installed}: its sdist ships a suite ({', '.join(tests)}): wire it into {__file__}")


def main() -> int:
    import django

    version = django.get_version()
    if django.VERSION < (6, 0):
        print(f"Django {version} has no tests/tasks/ (the Tasks framework is Django 6's)")
        backport_suites()
        return 0
    target = django_tests(version)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]))
    # The async tests read the stand-in dummy's ``results`` (the database) from their event loop.
    env["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    # The second run reuses the first one's test database (--reuse-db): made and migrated once.
    env["OWF_SQLITE_TEST_NAME"] = str(CACHE / "test-tasks.sqlite3")
    status = 0
    for files, worker in ((WITHOUT_WORKER, ""), (WITH_WORKER, "1")):
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-rs",
            "--reuse-db",
        ]
        command += ["-c", str(target / "pytest.ini"), "--rootdir", str(target)]
        command += [str(target / "tasks" / name) for name in files]
        print("==>", "Django's tests/tasks", ", ".join(files), "(with a runworkflows worker)" if worker else "")
        status |= subprocess.run(command, env=dict(env, OWF_UPSTREAM_WORKER=worker), cwd=target).returncode
    return status


if __name__ == "__main__":
    sys.exit(main())
