"""The README's quickstart, followed as a new user would, in a fresh project on the suite's kind of database.

``django-admin startproject`` and ``startapp`` make the project; the README's
``myapp/workflows.py``, ``myapp/views.py`` and ``mysite/urls.py`` are written
verbatim (read from README.md, so the quickstart cannot drift); then, as the
README says: ``migrate``, ``runserver``, the sign-up POSTed over HTTP (what its
curl line sends), and a worker (``runworkflows --burst``: the README's worker,
stopping once nothing is due). The run's first step is done, the account
exists, and the run is parked on its one-day sleep.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.test_user_project import user_environment

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = """
# Added by tests/test_quickstart.py: the README's INSTALLED_APPS line, and the suite's database server.
import json
import os

INSTALLED_APPS += ["django_openworkflow", "myapp"]
DATABASES = {"default": json.loads(os.environ["OWF_QUICKSTART_DATABASE"])}
"""


def readme_files() -> dict[str, str]:
    """The README quickstart's python blocks, keyed by the file named on their first line."""
    quickstart = (ROOT / "README.md").read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    files = {}
    for block in re.findall(r"```python\n(.*?)```", quickstart, re.S):
        first = block.splitlines()[0]
        match = re.match(r"# (\S+\.py)", first)
        assert match, f"a quickstart sample does not say which file it is: {first!r}"
        files[match.group(1)] = block
    return files


def quickstart_database(tmp: Path) -> dict[str, Any]:
    """A database of the suite's kind for the project; its own name, so parallel suites do not clash."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        return {"ENGINE": settings["ENGINE"], "NAME": str(tmp / "db.sqlite3")}
    database = {key: settings[key] for key in ("ENGINE", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    database["NAME"] = f"{settings['NAME']}_quickstart"
    return database


def recreate(database: dict[str, Any], *, create: bool) -> None:
    if connection.vendor == "sqlite":
        return  # a file in the temporary directory
    name = connection.ops.quote_name(database["NAME"])
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        if create:
            cursor.execute(f"CREATE DATABASE {name}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def project(tmp_path: Path, django_db_blocker: Any) -> Iterator[tuple[Path, dict[str, str]]]:
    env = user_environment(tmp_path)
    database = quickstart_database(tmp_path)
    env.update(DJANGO_SETTINGS_MODULE="mysite.settings", OWF_QUICKSTART_DATABASE=json.dumps(database))
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", "."], cwd=tmp_path, env=env, check=True)
    subprocess.run([sys.executable, "manage.py", "startapp", "myapp"], cwd=tmp_path, env=env, check=True)
    files = readme_files()
    assert set(files) == {"mysite/settings.py", "myapp/workflows.py", "myapp/views.py", "mysite/urls.py"}, files
    assert '"django_openworkflow", "myapp"' in files["mysite/settings.py"]
    with open(tmp_path / "mysite" / "settings.py", "a") as settings:
        settings.write(SETTINGS)
    for name in ("myapp/workflows.py", "myapp/views.py", "mysite/urls.py"):
        (tmp_path / name).write_text(files[name])
    with django_db_blocker.unblock():
        recreate(database, create=True)
    try:
        yield tmp_path, env
    finally:
        with django_db_blocker.unblock():
            recreate(database, create=False)


def manage(project: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=project, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def post(url: str, data: dict[str, str], deadline: float) -> dict[str, Any]:
    """POST as the README's curl line does, once runserver answers."""
    body = urllib.parse.urlencode(data).encode()
    while True:
        try:
            with urllib.request.urlopen(url, data=body, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.URLError as error:
            if isinstance(error, urllib.error.HTTPError) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.database  # the fresh project runs on the suite's database
def test_the_readme_quickstart_works_in_a_fresh_project(project: tuple[Path, dict[str, str]]) -> None:
    path, env = project
    manage(path, env, "migrate", "--noinput", "-v", "0")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
        cwd=path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        answer = post(f"http://127.0.0.1:{port}/signup/", {"email": "ada@example.com"}, time.monotonic() + 60)
    finally:
        server.terminate()
        server.wait(timeout=30)
    run_id = answer["run"]

    manage(path, env, "runworkflows", "--burst", "-v", "0")

    shown = json.loads(manage(path, env, "workflows", "show", run_id, "--json"))
    assert shown["workflow"] == "onboard-user", shown
    steps = {step["step"]: step["status"] for step in shown["steps"]}
    # The account is made; the run waits out its day, holding no worker.
    assert steps == {"create-account": "completed", "tips-delay": "running"}, shown
    assert shown["status"] == "parked", shown
    users = manage(
        path, env, "shell", "-v", "0", "-c", "from django.contrib.auth.models import User; print(User.objects.count())"
    )
    assert users.strip() == "1"


def test_the_readme_is_short():
    # The README is the front page: what it is, the quickstart, the two commands, links.
    # Everything else has a page in docs/.
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
