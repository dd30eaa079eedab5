"""``runworkflows --reload``: a changed ``workflows.py`` restarts the worker, which then runs the new code.

A real ``manage.py runworkflows --reload`` (through ``python -m django``) on
the test database, serving an app written to a temporary directory: edit its
``workflows.py`` and the next run gives the new result; a broken one is
waited out until it is fixed; SIGTERM to the command, or Ctrl-C, stops its
worker (which drains) and the command exits 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_openworkflow.models import WorkflowRun
from tests.conftest import CEILING, ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

WORKFLOW = "reload-echo"
STARTED = ": database "  # the worker's first log line: "worker <id>: database default (sqlite), ..."


def write_workflows(app: Path, value: str) -> None:
    (app / "workflows.py").write_text(
        textwrap.dedent(
            f"""
            from django_openworkflow import workflow


            @workflow(name={WORKFLOW!r})
            def echo(ctx):
                return {{"value": {value!r}}}
            """
        )
    )


class Log:
    """The command's stderr, read line by line on a thread (the parent's and its children's: one pipe)."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self.closed = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for raw in stream:  # type: ignore[attr-defined]
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))
        self.closed.set()  # every process holding the pipe has exited

    def count(self, text: str) -> int:
        return sum(text in line for line in list(self.lines))

    def wait_for(self, what: Callable[[], bool], timeout: float = CEILING) -> None:
        try:
            wait_until(what, timeout=timeout, interval=0.05)
        except AssertionError:
            raise AssertionError("not seen in the log:\n" + "\n".join(self.lines)) from None


@pytest.fixture
def project(tmp_path: Path) -> Path:
    app = tmp_path / "reloadapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    write_workflows(app, "before")
    (tmp_path / "reload_settings.py").write_text(
        'from tests.settings import *  # noqa: F403\n\nINSTALLED_APPS = [*INSTALLED_APPS, "reloadapp"]  # noqa: F405\n'
    )
    return tmp_path


@pytest.fixture
def command(project: Path) -> Iterator[tuple[subprocess.Popen[bytes], Log]]:
    env = dict(
        os.environ,
        OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        OWF_LOG_LEVEL="INFO",
        PYTHONPATH=os.pathsep.join([str(project), str(ROOT)]),
        PYTHONDONTWRITEBYTECODE="1",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "runworkflows", "--reload", "--settings=reload_settings", "--concurrency=2"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a process group of its own: what a terminal's Ctrl-C reaches, and the clean-up
    )
    assert proc.stderr is not None
    log = Log(proc.stderr)
    try:
        yield proc, log
    finally:
        if proc.poll() is None or not log.closed.wait(5):  # the command or its worker is still there
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        log.closed.wait(5)
        proc.stderr.close()


def run_once() -> dict[str, str]:
    run = WorkflowRun.objects.create(workflow_name=WORKFLOW, status="pending", input=None, available_at=timezone.now())
    wait_until(lambda: WorkflowRun.objects.get(id=run.id).status == "completed", timeout=CEILING)
    return WorkflowRun.objects.get(id=run.id).output


def edit_until(
    path: Path, edit: Callable[[], None], seen: Callable[[], bool], what: str, lines: list[str], ahead: int = 1
) -> None:
    """Edit ``path`` (its time moved ``ahead`` seconds and more) until ``seen()``: the reloader missed an edit made
    before its first look at the file, so edit again, up to five times."""
    for attempt in range(5):
        edit()
        later = time.time() + attempt + ahead
        os.utime(path, (later, later))
        try:
            wait_until(seen, timeout=CEILING, interval=0.05)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{what}:\n" + "\n".join(lines))  # the command's log as it is by then


def test_a_changed_file_restarts_the_worker_which_runs_the_new_code_and_sigterm_stops_it(project, command):
    proc, log = command
    log.wait_for(lambda: log.count("watching for code changes") == 1 and log.count(STARTED) >= 1)
    assert log.count("starts again when a file of its code changes") == 1  # the parent's line
    assert run_once() == {"value": "before"}

    # The reloader compares each file's time with the one it saw on its first look, a second apart at most:
    # edit again until the restart is seen (an edit before that first look goes unnoticed).
    time.sleep(1.5)
    edit_until(
        project / "reloadapp" / "workflows.py",
        lambda: write_workflows(project / "reloadapp", "after"),
        lambda: log.count("watching for code changes") >= 2,
        "no restart",
        log.lines,
    )
    assert log.count("workflows.py changed: restarting") >= 1
    assert run_once() == {"value": "after"}  # the new code, in a new process
    assert proc.poll() is None

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert log.closed.wait(15), "the worker process outlived the command"
    assert log.count("SIGTERM received") == 1  # passed on to the worker, which drained
    assert log.count("stopped after") >= 2  # the first worker (restarted), the last (SIGTERM)


def test_a_workflows_py_that_breaks_waits_for_the_fix(project, command):
    proc, log = command
    log.wait_for(lambda: log.count("watching for code changes") == 1)
    time.sleep(1.5)
    workflows_py = project / "reloadapp" / "workflows.py"
    edit_until(
        workflows_py,
        lambda: workflows_py.write_text("def broken(:\n"),
        lambda: log.count("starts again when a file changes") >= 1,
        "the broken file did not stop the worker",
        log.lines,
    )
    assert any("SyntaxError" in line for line in log.lines)
    assert proc.poll() is None  # waiting for a fix
    log.wait_for(lambda: log.count("watching for code changes") >= 2)  # the command's own watcher
    time.sleep(1.5)
    edit_until(
        workflows_py,
        lambda: write_workflows(project / "reloadapp", "fixed"),
        lambda: log.count("watching for code changes") >= 3,
        "the fix did not start the worker again",
        log.lines,
        ahead=10,
    )
    assert run_once() == {"value": "fixed"}

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert log.closed.wait(15)


def test_ctrl_c_drains_the_worker_and_ends_the_command(command):
    proc, log = command
    log.wait_for(lambda: log.count("watching for code changes") == 1)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal sends it to the whole group: the command and its worker
    assert proc.wait(60) == 0
    assert log.closed.wait(15), "the worker process outlived the command"
    assert log.count("SIGINT received") == 1  # once: the command does not pass it on a second time
    assert log.count("stopped after") == 1


def test_a_code_watcher_that_breaks_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from django_openworkflow.worker.reload import ChangeWatcher

    watcher = ChangeWatcher(lambda path: None)

    def broken_run(main_thread: threading.Thread) -> None:
        raise OSError("inotify limit reached")

    watcher.reloader.run = broken_run  # type: ignore[method-assign]
    with caplog.at_level("ERROR", logger="django_openworkflow.worker"):
        watcher.start()
        assert watcher._thread is not None
        watcher._thread.join(timeout=10)
    assert "the code watcher of runworkflows --reload stopped" in caplog.text
    assert "inotify limit reached" in caplog.text


def test_a_worker_killed_by_a_signal_exits_the_command_as_a_shell_says() -> None:
    from django_openworkflow.worker.reload import _exit_status

    assert _exit_status(-signal.SIGINT) == 130  # not 254, which sys.exit(-2) would give
    assert (_exit_status(0), _exit_status(1), _exit_status(3)) == (0, 1, 3)
