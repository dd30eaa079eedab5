"""The README's quickstart and the tutorial, followed as a newcomer would, in a fresh project and virtualenv.

The package is installed as the docs say it must be until it is on PyPI:
``pip install /path/to/django-openworkflow`` (with the database's extra, as
docs/howto/install.md writes it) into a new virtualenv, from a copy of this
checkout (a build leaves ``build/`` in the source; the checkout gets none).
One virtualenv serves every test of a session, across pytest-xdist
processes. The projects' commands then run with that virtualenv's ``bin``
first on ``PATH`` (what ``source .venv/bin/activate`` does) and none of this
suite's environment, so they import the installed package, not the checkout.

The console commands run are checked to be the pages' own; the files are the
pages' ```python blocks, read from the pages, so the docs cannot drift from
what works. What a test changes: a free port instead of 8000, ``--noreload``,
and on PostgreSQL or MariaDB a database of its own (a unique name, dropped
after) in place of the SQLite file. Every wait is for a condition (a run's
end, a status, a log line), with a generous ceiling.

- README: ``startproject``/``startapp``, the settings line, ``workflows.py``,
  ``views.py`` and ``urls.py``, ``migrate``, ``runserver``, the sign-up POSTed
  (what its curl line sends), and a worker (``runworkflows --burst``: the
  README's worker, stopping once nothing is due). The first step is done, the
  account exists, and the run is parked on its one-day sleep.
- Tutorial, section by section: the project and app, the settings, the
  workflow, the view and URL, a sign-up while no worker runs (``pending``),
  the worker (its first line names ``welcome-user``; the welcome e-mail is
  printed once), the run in ``manage.py shell`` (the page's doctest), the
  signal version (the run is ``waiting`` and its admin page says for what; the
  confirm link finishes it), and the flaky step (one failed attempt, then done).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import pytest
from django.db import connection

import django_openworkflow
from tests.conftest import built_once

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TUTORIAL = ROOT / "docs" / "tutorial" / "index.md"
INSTALL = ROOT / "docs" / "howto" / "install.md"
VERSION = django_openworkflow.__version__
CLONE = "/path/to/django-openworkflow"  # what the docs write for the clone's directory
# What a build of the clone reads besides the package (setup.cfg: long_description, license_files; MANIFEST.in).
PROJECT_FILES = ("setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md", "CHANGELOG.md", "LICENSE")
EXTRAS = {"sqlite": "", "postgresql": "[postgres]", "mysql": "[mysql]"}
CEILING = 180.0  # seconds: for a run to finish, a server to answer, a log line to appear, on a busy machine


# --- the pages ---------------------------------------------------------------------------------------------------


class Page:
    """A docs page's ```python and ```console blocks; a test takes each once and may not leave one out."""

    def __init__(self, path: Path, section: str | None = None) -> None:
        text = path.read_text()
        if section is not None:
            text = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
        self.path = path
        self.python = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
        consoles = re.findall(r"^```console\n(.*?)^```", text, re.S | re.M)
        self.commands = [line[2:] for block in consoles for line in block.splitlines() if line.startswith("$ ")]
        self.outputs = [line for block in consoles for line in block.splitlines() if not line.startswith("$ ")]
        self.followed: set[int] = set()
        self.ran: set[str] = set()

    def block(self, first_line: str, *, prefix: bool = False) -> str:
        """The one ```python block whose first line is ``first_line`` (with ``prefix``, starts with it)."""
        found = [
            i
            for i, block in enumerate(self.python)
            if (block.startswith(first_line) if prefix else block.splitlines()[0] == first_line)
        ]
        assert len(found) == 1, f"{self.path.name}: {len(found)} ```python blocks begin with {first_line!r}"
        self.followed.add(found[0])
        return self.python[found[0]]

    def command(self, pattern: str) -> str:
        """The page's one console command that matches ``pattern`` (a regular expression, whole line, comment apart)."""
        found = [line for line in self.commands if re.fullmatch(pattern, line.split("  #")[0].rstrip())]
        assert len(found) == 1, f"{self.path.name}: {len(found)} commands match {pattern!r}: {self.commands}"
        self.ran.add(found[0])
        return found[0].split("  #")[0].rstrip()

    def assert_all_followed(self) -> None:
        """Every block and command was taken: a step added to the page must be added here too."""
        left = [block.splitlines()[0] for i, block in enumerate(self.python) if i not in self.followed]
        left += [f"$ {line}" for line in self.commands if line not in self.ran]
        assert not left, f"{self.path.name} has steps this test does not follow: {left}"


def installed_apps(block: str) -> str:
    """A settings block's INSTALLED_APPS, its "..." being what startproject put there."""
    assert "..., " in block, block
    return block.replace("..., ", "*INSTALLED_APPS, ", 1)


def replace_workflow(source: str, block: str) -> str:
    """``workflows.py`` with the tutorial's new ``welcome_user`` (and what comes with it) for the old one.

    The tutorial's file ends with ``welcome_user``: a block whose first line says it replaces it replaces
    everything from the decorator on, as a reader deletes the old function and pastes the new code.
    """
    start = source.index('@workflow(name="welcome-user")')
    return source[:start] + block.split("\n", 1)[1]


def test_every_pypi_install_line_says_it_waits_for_the_release() -> None:
    # The package is not on PyPI yet: a `pip install django-openworkflow` a newcomer copies fails.
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    unlabelled = [
        f"{page.relative_to(ROOT)}: {paragraph.strip()[:120]!r}"
        for page in pages
        if "_build" not in page.parts
        for paragraph in page.read_text().split("\n\n")
        if re.search(r"pip install \"?django-openworkflow\b", paragraph) and "released" not in paragraph
    ]
    assert not unlabelled, "install from PyPI, not labelled as waiting for the release:\n" + "\n".join(unlabelled)


def test_the_install_page_names_the_wheel_make_dist_builds() -> None:
    # tests/test_release.py checks that the build makes this file; the page must name it.
    names = set(re.findall(r"dist/(django_openworkflow-\S+?\.whl)", INSTALL.read_text()))
    assert names == {f"django_openworkflow-{VERSION}-py3-none-any.whl"}, names


def test_the_readme_is_short() -> None:
    # The README is the front page: what it is, the quickstart, the two commands, links.
    # Everything else has a page in docs/.
    assert len(README.read_text().splitlines()) <= 150


# --- the virtualenv ----------------------------------------------------------------------------------------------


def clean_environment() -> dict[str, str]:
    """The environment of a newcomer's shell: none of this suite's settings, no virtualenv active."""
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "PYTEST_", "OWF_", "OPENWORKFLOW_"))
        and key not in {"DATABASE_URL", "MARIADB_URL", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}
    }


def activated(venv: Path) -> dict[str, str]:
    """The environment after ``source .venv/bin/activate``."""
    env = clean_environment()
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def sh(line: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Run a page's console line as a shell runs it; past ``timeout``, kill it and what it started."""
    with subprocess.Popen(
        line, shell=True, cwd=cwd, env=env, stdout=PIPE, stderr=PIPE, text=True, start_new_session=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            raise AssertionError(
                f"$ {line}\ndid not finish in {timeout:g} s:\n{stdout[-3000:]}{stderr[-3000:]}"
            ) from None
    assert process.returncode == 0, f"$ {line}\n{stdout[-3000:]}{stderr[-3000:]}"
    return stdout


def copy_clone(into: Path) -> Path:
    """What ``pip install`` reads of a clone: the package and the build's files."""
    clone = into / "django-openworkflow"
    clone.mkdir()
    for name in PROJECT_FILES:
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, clone / name)
    package = ROOT / "django_openworkflow"
    shutil.copytree(package, clone / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return clone


@pytest.fixture(scope="session")
def newcomer_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the package installed from the clone as the docs say, made once per session."""
    extra = EXTRAS[connection.vendor]
    name = f"newcomer-venv-{extra.strip('[]') or 'sqlite'}"
    with built_once(tmp_path_factory, name) as (base, built):
        venv = base / name
        if not built:
            shutil.rmtree(venv, ignore_errors=True)
            work = base / f"newcomer-clone-{uuid.uuid4().hex[:8]}"
            work.mkdir()
            clone = copy_clone(work)
            tutorial, install = Page(TUTORIAL, "Install"), Page(INSTALL, "Install")
            # The interpreter running the suite: a machine may have no `python` on PATH before a venv.
            line = tutorial.command(r"python -m venv \.venv").replace(".venv", str(venv))
            sh(line.replace("python", shlex.quote(sys.executable), 1), base, clean_environment())
            tutorial.command(r"source \.venv/bin/activate")  # activated() does what it does
            line = tutorial.command(f"pip install {CLONE}")
            if extra:  # as the install page writes a database's extra
                line = install.command(f'pip install "{re.escape(CLONE + extra)}"')
            sh(line.replace(CLONE, str(clone)), base, activated(venv))
    return venv


def test_the_package_comes_from_the_virtualenv(newcomer_venv: Path, tmp_path: Path) -> None:
    where = sh("python -c 'import django_openworkflow as p; print(p.__file__)'", tmp_path, activated(newcomer_venv))
    assert Path(where.strip()).is_relative_to(newcomer_venv), where


# --- the project -------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def project_database(directory: Path) -> dict[str, Any] | None:
    """A database of the suite's kind for the project, with a name of its own; None on SQLite (the page's file)."""
    if connection.vendor == "sqlite":
        return None
    settings = connection.settings_dict
    database = {key: settings[key] for key in ("ENGINE", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}
    database["NAME"] = f"owf_newcomer_{uuid.uuid4().hex[:12]}"  # parallel suites on one server must not clash
    return database


def create_database(database: dict[str, Any] | None, *, create: bool) -> None:
    if database is None:
        return
    name = connection.ops.quote_name(database["NAME"])
    with connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {name}")
        if create:
            cursor.execute(f"CREATE DATABASE {name}")


class Project:
    """A newcomer's project: its directory, its shell's environment, its server and worker processes."""

    def __init__(self, root: Path, venv: Path, database: dict[str, Any] | None) -> None:
        self.root = root
        self.dir = root
        self.env = activated(venv)
        self.database = database
        self.port = free_port()
        self.server: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.worker_out: IO[bytes] | None = None

    def sh(self, line: str) -> str:
        return sh(line, self.dir, self.env, timeout=CEILING)

    def settings(self, text: str) -> None:
        with open(self.dir / "mysite" / "settings.py", "a") as settings:
            settings.write(f"\n{text}\n")

    def use_test_database(self) -> None:
        """On PostgreSQL or MariaDB: the project's DATABASES, what the page says to change there."""
        if self.database is not None:
            self.settings(
                "# Added by tests/test_quickstart.py: a database on the suite's server.\n"
                f"DATABASES = {{'default': {json.dumps(self.database)}}}"
            )

    def shell(self, code: str) -> str:
        """``python manage.py shell -c code``: its output."""
        return sh(f"python manage.py shell -v 0 -c {shlex.quote(code)}", self.dir, self.env, timeout=CEILING + 60)

    def start_server(self) -> None:
        self.stop_server()
        self.server = subprocess.Popen(
            ["python", "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=60)
            self.server = None

    def start_worker(self, line: str) -> None:
        """The page's worker command, its output (log and printed e-mails) in ``worker.log``."""
        self.stop_worker()
        self.worker_out = open(self.root / "worker.log", "ab")
        self.worker = subprocess.Popen(
            shlex.split(line), cwd=self.dir, env=self.env, stdout=self.worker_out, stderr=subprocess.STDOUT
        )

    def stop_worker(self) -> None:
        """Ctrl-C: the worker stops gracefully, and says nothing went wrong."""
        if self.worker is not None:
            self.worker.send_signal(signal.SIGINT)
            code = self.worker.wait(timeout=CEILING)
            self.worker = None
            assert code == 0, f"the worker exited with {code}:\n{self.worker_log()[-3000:]}"
        if self.worker_out is not None:
            self.worker_out.close()
            self.worker_out = None

    def worker_log(self) -> str:
        path = self.root / "worker.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for_log(self, text: str) -> None:
        deadline = time.monotonic() + CEILING
        while text not in self.worker_log():
            assert self.worker is not None and self.worker.poll() is None, f"the worker exited:\n{self.worker_log()}"
            assert time.monotonic() < deadline, f"the worker never logged {text!r}:\n{self.worker_log()}"
            time.sleep(0.1)

    def request(self, curl: str, substitute: dict[str, str] | None = None) -> tuple[int, str]:
        """What a page's curl line does, against this project's server: (status, body)."""
        match = re.fullmatch(r"curl(?: -X POST)?(?: -d (\S+))? (http://127\.0\.0\.1:8000/\S*)", curl)
        assert match, f"a curl line this test cannot follow: {curl!r}"
        data, url = match.groups()
        for example, real in (substitute or {}).items():
            url = url.replace(example, real)
        url = url.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        body = urllib.parse.urlencode(dict([data.split("=", 1)])).encode() if data else None
        deadline = time.monotonic() + CEILING
        while True:
            try:
                with urllib.request.urlopen(url, data=body, timeout=CEILING) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError:
                raise
            except (urllib.error.URLError, ConnectionError):  # the server is still starting
                assert self.server is not None and self.server.poll() is None, "runserver exited"
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        try:
            self.stop_worker()
        finally:
            if self.worker is not None:
                self.worker.kill()
            self.stop_server()


@pytest.fixture
def project(newcomer_venv: Path, tmp_path: Path, django_db_blocker: Any) -> Iterator[Project]:
    database = project_database(tmp_path)
    with django_db_blocker.unblock():
        create_database(database, create=True)
    made = Project(tmp_path, newcomer_venv, database)
    try:
        yield made
    finally:
        try:
            made.close()
        finally:
            with django_db_blocker.unblock():
                create_database(database, create=False)


# --- the README --------------------------------------------------------------------------------------------------


@pytest.mark.database
def test_the_readme_quickstart_works_in_a_fresh_project(project: Project) -> None:
    readme = Page(README, "Quickstart")
    readme.command(f"pip install {CLONE}")  # newcomer_venv ran it
    project.sh(readme.command(r"django-admin startproject mysite && cd mysite && python manage.py startapp myapp"))
    project.dir = project.root / "mysite"
    installed = readme.block("# mysite/settings.py")
    assert 'INSTALLED_APPS = [..., "django_openworkflow", "myapp"]' in installed, installed
    project.settings(installed_apps(installed))
    project.use_test_database()
    for name in ("myapp/workflows.py", "myapp/views.py", "mysite/urls.py"):
        (project.dir / name).write_text(readme.block(f"# {name}", prefix=True))

    project.sh(readme.command("python manage.py migrate") + " --noinput -v 0")
    readme.command("python manage.py runserver")
    project.start_server()
    status, body = project.request(readme.command(r"curl -d email=ada@example\.com \S+"))
    project.stop_server()
    assert status == 200, body
    run_id = json.loads(body)["run"]

    project.sh(readme.command("python manage.py runworkflows") + " --burst -v 0")

    shown = json.loads(project.sh(f"python manage.py workflows show {run_id} --json"))
    assert shown["workflow"] == "onboard-user", shown
    steps = {step["step"]: step["status"] for step in shown["steps"]}
    # The account is made; the run waits out its day, holding no worker.
    assert steps == {"create-account": "completed", "tips-delay": "running"}, shown
    assert shown["status"] == "parked", shown
    users = project.shell("from django.contrib.auth.models import User; print(User.objects.count())")
    assert users.strip() == "1"
    readme.assert_all_followed()


# --- the tutorial ------------------------------------------------------------------------------------------------


RESULT = """
from django_openworkflow import get_run

run_id = {run_id!r}
get_run(run_id).result(timeout={ceiling})  # finished first: what the page shows next is a finished run
"""

DOCTEST = (
    RESULT
    + """
import doctest, sys
from django_openworkflow.definitions.registry import registry

# The app is installed: the package found its workflows.py. (This shell runs no system checks,
# which would import it anyway, through the URLs and the views.)
assert registry.get("welcome-user", None) is not None, "myapp/workflows.py was not found"

test = doctest.DocTestParser().get_doctest({block!r}, {{"run_id": run_id}}, "tutorial", "index.md", 0)
runner = doctest.DocTestRunner()
runner.run(test)
sys.exit(1 if runner.failures else 0)
"""
)

WAITING = """
import sys, time
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django_openworkflow import get_run

handle = get_run({run_id!r})
give_up = time.monotonic() + {ceiling}
while handle.display_status() != "waiting":
    if handle.status() not in ("pending", "running") or time.monotonic() > give_up:  # finished: never waits
        sys.exit(f"the run is {{handle.display_status()}}, not waiting")
    time.sleep(0.05)
client = Client(HTTP_HOST="localhost")  # startproject: DEBUG, no ALLOWED_HOSTS, so localhost only
client.force_login(User.objects.create_superuser("admin", "admin@example.com", "not-a-secret"))
page = client.get(reverse("admin:django_openworkflow_workflowrun_change", args=[handle.id])).content.decode()
print(page)
"""


def run_id_of(status: int, body: str) -> str:
    assert status == 202, body
    return str(json.loads(body)["run_id"])


@pytest.mark.database
def test_the_tutorial_works_in_a_fresh_project(project: Project) -> None:
    page = Page(TUTORIAL)
    page.command(r"python -m venv \.venv")  # newcomer_venv ran the Install section
    page.command(r"source \.venv/bin/activate")
    page.command(f"pip install {CLONE}")

    # Make a project and an app.
    project.sh(page.command("django-admin startproject mysite"))
    page.command("cd mysite")
    project.dir = project.root / "mysite"
    project.sh(page.command("python manage.py startapp myapp"))
    installed, databases = (block for block in page.python if block.startswith("# mysite/settings.py\n"))
    page.followed.update(i for i, block in enumerate(page.python) if block.startswith("# mysite/settings.py\n"))
    assert '"django_openworkflow",\n    "myapp",\n' in installed, installed
    # The list's "..." stands for what startproject put there.
    project.settings(installed_apps(installed))
    # The console e-mail backend: Django 6.1's startproject has it (MAILERS), and refuses the old setting.
    mail = page.block("# mysite/settings.py, on Django 5.2 and 6.0")
    if project.sh("python -c 'import django; print(django.VERSION[:2] < (6, 1))'").strip() == "True":
        project.settings(mail)
    project.settings(databases)
    project.use_test_database()
    project.sh(page.command("python manage.py migrate") + " --noinput -v 0")

    # Write a workflow, start it from a view.
    (project.dir / "myapp" / "workflows.py").write_text(page.block("# myapp/workflows.py"))
    (project.dir / "myapp" / "views.py").write_text(page.block("# myapp/views.py"))
    (project.dir / "mysite" / "urls.py").write_text(page.block("# mysite/urls.py"))
    page.command("python manage.py runserver")
    project.start_server()
    ada = run_id_of(*project.request(page.command(r"curl -X POST -d email=ada@example\.com \S+")))
    # Nothing else happens yet: the run is pending, waiting for a worker.
    assert json.loads(project.sh(f"python manage.py workflows show {ada} --json"))["status"] == "pending"

    # Run a worker: its first line names the workflows it serves; it runs the run, sleep included.
    worker = page.command("python manage.py runworkflows")
    project.start_worker(worker)
    project.wait_for_log("workflows: welcome-user")
    follow = page.block(">>> from django_openworkflow import get_run", prefix=True)
    project.shell(DOCTEST.format(run_id=ada, ceiling=CEILING, block=follow))
    assert project.worker_log().count("Subject: Welcome!") == 1, project.worker_log()  # sent once
    assert project.worker_log().count("Subject: Three tips") == 1, project.worker_log()

    # Wait for a signal: the new welcome_user, the confirm view and its URL; the worker and server restarted.
    workflows = project.dir / "myapp" / "workflows.py"
    replaces = "# myapp/workflows.py: this welcome_user replaces the old one"
    workflows.write_text(replace_workflow(workflows.read_text(), page.block(replaces)))
    project.start_worker(worker)  # "Restart the worker"
    with open(project.dir / "myapp" / "views.py", "a") as views:
        views.write("\n\n" + page.block("# myapp/views.py (continued)"))
    urls = project.dir / "mysite" / "urls.py"
    route = 'path("confirm/<uuid:run_id>/", views.confirm)'
    assert route in TUTORIAL.read_text()
    signup = 'path("signup/", views.signup),'
    assert signup in urls.read_text()
    urls.write_text(urls.read_text().replace(signup, f"{signup}\n    {route},"))
    project.start_server()  # runserver reloads itself; --noreload here, so started again
    grace = run_id_of(*project.request(page.command(r"curl -X POST -d email=grace@example\.com \S+")))
    admin_page = project.shell(WAITING.format(run_id=grace, ceiling=CEILING))
    assert "owf-status-waiting" in admin_page and "waiting for signal &#x27;email-confirmed&#x27;" in admin_page
    example_id = json.loads(next(line for line in page.outputs if "5d1c8e7a" in line))["run_id"]
    status, body = project.request(page.command(r"curl \S+/confirm/\S+"), {example_id: grace})
    assert (status, body) == (200, "Thanks, your address is confirmed."), body
    project.shell(
        RESULT.format(run_id=grace, ceiling=CEILING) + page.block("assert get_run(run_id).result()", prefix=True)
    )

    # A step that fails: the flaky step, the worker restarted, a third address.
    replaces = "# myapp/workflows.py: subscribe is new, this welcome_user replaces the old one"
    workflows.write_text(replace_workflow(workflows.read_text(), page.block(replaces)))
    project.start_worker(worker)
    alan = run_id_of(*project.request(page.command(r"curl -X POST -d email=alan@example\.com \S+")))
    project.shell(RESULT.format(run_id=alan, ceiling=CEILING) + page.block("handle = get_run(run_id)", prefix=True))
    project.stop_worker()
    page.assert_all_followed()
