"""``runworkflows --reload``: start the worker again when the code changes (for development).

Django's autoreloader, as ``runserver`` uses it: the command starts itself
again as a child process (``DJANGO_AUTORELOAD_ENV=true``), and starts a new
child each time one exits with code 3. The child watches the files of every
module it imported (Django's ``StatReloader``, or Watchman's when
``pywatchman`` is installed); when one changes, it stops claiming, lets its
in-flight slices finish (``--drain-timeout``) and exits with 3. Changes
Django handles in place (templates, compiled translations) restart nothing.

Two things differ from ``runserver``'s ``autoreload.run_with_reloader``,
because a worker holds runs: the worker runs in the child's main thread, so
SIGTERM and SIGINT drain it as they do without ``--reload`` (runserver's
child runs its server in a daemon thread and exits at once, which would
leave the runs in flight to wait for their leases to expire); and the parent
passes a SIGTERM on to the child and waits for it (runserver's kills its
child). A child that fails to start (a ``workflows.py`` that does not import)
is started again when a file changes, as runserver does.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.utils import autoreload

from .signals import relayed_signals

logger = logging.getLogger("django_openworkflow.worker")

RESTART_CODE = 3
"""The exit code of a child that asks to be started again (``autoreload.trigger_reload``'s)."""


def in_child() -> bool:
    """This process is the one the reloader started: it runs the worker."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


class ChangeWatcher:
    """Django's reloader on a daemon thread: ``on_change(path)`` for a changed file Django does not handle in place.

    Django's reloader calls ``sys.exit(3)`` when no ``file_changed``
    receiver handled a change; here ``on_change`` is called instead, so that
    the worker stops first.
    """

    def __init__(self, on_change: Callable[[Path], None]) -> None:
        self.on_change = on_change
        self.reloader = autoreload.get_reloader()
        self.reloader.notify_file_changed = self._notify  # type: ignore[method-assign]
        self._thread: threading.Thread | None = None

    def _notify(self, path: str | os.PathLike[str]) -> None:
        results = autoreload.file_changed.send(sender=self.reloader, file_path=path)
        if not any(handled for _, handled in results):  # a template or a translation: reloaded in place
            self.on_change(Path(path))

    def _started(self, sender: object, **kwargs: Any) -> None:
        # Sent once the URLconf is imported (its modules are watched too), just before the first look at the files.
        logger.info("watching for code changes with %s", type(self.reloader).__name__)

    def start(self) -> None:
        autoreload.autoreload_started.connect(self._started, sender=self.reloader, weak=False)
        self._thread = threading.Thread(target=self._watch, name="owf-reloader", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        try:
            self.reloader.run(threading.main_thread())
        except Exception:  # the worker goes on without reloading: say so rather than die silently
            logger.exception("the code watcher of runworkflows --reload stopped; restart the worker by hand")

    def stop(self) -> None:
        self.reloader.stop()
        autoreload.autoreload_started.disconnect(self._started, sender=self.reloader)


def watch_while(run: Callable[[], None], stop: Callable[[], None]) -> bool:
    """In the child: ``run()`` (the worker) with a watcher that calls ``stop()`` on a change; whether one came."""
    # Appended by the watcher's thread, read by this one once run() returns: list.append is atomic,
    # and nothing else is shared.
    changed: list[Path] = []

    def on_change(path: Path) -> None:
        if not changed:
            logger.info("%s changed: restarting once the runs in flight are done", path)
        changed.append(path)
        stop()

    watcher = ChangeWatcher(on_change)
    watcher.start()
    try:
        run()
    finally:
        watcher.stop()
    return bool(changed)


def supervise() -> int:
    """In the parent: start the child, again after each change; its exit code once it stops for good.

    SIGTERM is passed on to the child, whose worker drains and exits; SIGINT
    (Ctrl-C) reaches the child from the terminal itself, as with runserver.
    """
    args = autoreload.get_child_arguments()
    env = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true"}
    stopping = threading.Event()
    changed = threading.Event()
    # The child running now: assigned by this thread, read by "owf-signals" (one reference, read whole).
    child: subprocess.Popen[bytes] | None = None
    watcher: ChangeWatcher | None = None

    def on_signal(signum: int) -> None:  # on the "owf-signals" thread (signals.py)
        stopping.set()
        changed.set()  # ends a wait for a fix
        if signum == signal.SIGTERM and child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    logger.info("runworkflows --reload: the worker starts again when a file of its code changes")
    try:
        with relayed_signals(on_signal):
            code = 0
            while not stopping.is_set():
                child = subprocess.Popen(args, env=env, close_fds=False)
                code = child.wait()
                if stopping.is_set() or code == RESTART_CODE:
                    continue
                logger.warning(
                    "the worker exited with code %d; it starts again when a file changes (Ctrl-C to stop)", code
                )
                if watcher is None:
                    watcher = ChangeWatcher(lambda path: changed.set())
                    watcher.start()
                changed.clear()
                while not changed.wait(1.0):
                    pass
            return _exit_status(code)
    finally:
        if watcher is not None:
            watcher.stop()


def _exit_status(returncode: int) -> int:
    """A child's return code as this process's exit status: killed by signal N is 128 + N, as a shell says."""
    return 128 - returncode if returncode < 0 else returncode
