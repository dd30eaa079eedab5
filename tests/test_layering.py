"""Layering rules that import-linter cannot express.

Only the backend classes know which database they talk to; the engine is
handed its store and never looks one up; no engine file grows past a size
a reader can hold.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "django_openworkflow"

# The backend classes, the one place that picks a class by vendor, and the
# migrations (frozen history that must keep doing what it did).
ALLOWED = ("store/backends/", "store/__init__.py", "migrations/")

VENDOR = re.compile(r"\.vendor\b|\bmysql_is_mariadb\b|\bconnection\.features\.")


def test_nothing_outside_the_backends_branches_on_the_database_vendor():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if VENDOR.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == [], "vendor branches outside store/backends/:\n" + "\n".join(offenders)


ENGINE_FILE_LINES = 400


def test_the_engine_is_handed_its_store_and_never_looks_one_up():
    offenders = []
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "get_backend" in line:
                offenders.append(f"engine/{path.name}:{number}: {line.strip()}")
    assert offenders == [], "the engine looks its store up instead of being handed it:\n" + "\n".join(offenders)


def test_no_engine_file_is_over_the_size_limit():
    sizes = {path.name: len(path.read_text().splitlines()) for path in (PACKAGE / "engine").rglob("*.py")}
    too_long = {name: lines for name, lines in sizes.items() if lines > ENGINE_FILE_LINES}
    assert too_long == {}, f"engine files over {ENGINE_FILE_LINES} lines: split them by job"
