"""The legs' scope (tests/conftest.py): a database's second leg runs only the tests that reach the database.

Collected in a subprocess, as ``make test`` collects each leg.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CEILING

ROOT = Path(__file__).resolve().parent.parent
FILES = ["tests/test_quickstart.py", "tests/worker/test_schedules.py"]


def collected(scope: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *FILES],
        cwd=ROOT,
        env=dict(os.environ, OWF_TEST_SCOPE=scope),
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_a_database_leg_keeps_the_database_tests_and_deselects_the_others() -> None:
    every, scoped = collected("all"), collected("database")
    assert scoped < every
    # Asks for no database: ran on the SQLite leg, the same everywhere.
    assert "tests/test_quickstart.py::test_the_readme_is_short" in every - scoped
    assert "tests/worker/test_schedules.py::test_six_fields_put_the_seconds_last" in every - scoped
    # django_db marker; a subprocess on the test database (@pytest.mark.database): both kept.
    assert "tests/worker/test_schedules.py::test_no_schedule_declared_costs_no_query" in scoped
    assert "tests/test_quickstart.py::test_the_readme_quickstart_works_in_a_fresh_project" in scoped


def test_an_unknown_scope_is_refused() -> None:
    with pytest.raises(AssertionError, match="OWF_TEST_SCOPE must be 'all' or 'database'"):
        collected("postgres")
