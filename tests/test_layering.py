"""Layering rules that import-linter cannot express: only the backend classes know which database they talk to."""

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
