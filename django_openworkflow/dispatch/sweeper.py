"""``runworkflows --dispatch-only``: send Celery tasks for due runs, in a loop, until stopped."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections

from ..client.dispatcher import get_dispatcher
from ..worker.runner import recycle_connections
from ..worker.schedules import Scheduler
from ..worker.signals import relayed_signals

logger = logging.getLogger("django_openworkflow.dispatch")


class SweepLoop:
    """Runs :func:`dispatch.celery.sweep` every ``interval`` seconds (at once while a backlog remains).

    Safe on several machines at once: the sweep only reads, and claims are fenced.
    """

    def __init__(self, interval: float = 1.0, batch: int = 1000) -> None:
        try:
            dispatcher = get_dispatcher()
        except ImportError as exc:
            raise ImproperlyConfigured(f"OPENWORKFLOW['DISPATCH'] cannot be imported: {exc}") from None
        sweep = getattr(dispatcher, "sweep", None)
        if sweep is None:
            raise ImproperlyConfigured(
                "--dispatch-only needs a dispatcher that sends due runs (OPENWORKFLOW['DISPATCH'] = 'celery')"
            )
        self._sweep = sweep
        self.interval = interval
        self.batch = batch
        self._stop = threading.Event()
        self.scheduler = Scheduler()  # cron schedules start here too: no runworkflows worker runs under Celery
        from ..worker.maintenance import sweepers

        self.sweepers = sweepers()  # retention's and priority aging's sweeps too, each on a thread of its own

    def stop(self, signum: int | None = None) -> None:
        self._stop.set()

    @contextlib.contextmanager
    def signals_handled(self) -> Iterator[None]:
        """Inside, SIGTERM and SIGINT stop this loop; outside, the handlers before (main thread only).

        ``run()`` installs them itself; ``runworkflows --dispatch-only``
        installs them first, so that a signal while it starts up stops it too.
        """
        with relayed_signals(self.stop):
            yield

    def run(self, install_signal_handlers: bool = True) -> None:
        """Sweep until stopped: by ``stop()``, or SIGTERM or SIGINT when called on the main thread."""
        with self.signals_handled() if install_signal_handlers else contextlib.nullcontext():
            self._run()

    def _run(self) -> None:
        for sweeper in self.sweepers:
            sweeper.start()
        try:
            while not self._stop.is_set():
                self.scheduler.tick()  # at most once a second, never raises
                try:
                    sent = self._sweep(limit=self.batch)
                except DatabaseError as exc:
                    logger.warning("sweep failed: %s", exc)
                    recycle_connections()
                    sent = 0
                if sent < self.batch:
                    self._stop.wait(self.interval)
        finally:
            for sweeper in self.sweepers:
                sweeper.stop()
                sweeper.join(5)
            connections.close_all()
