"""``manage.py runworkflows``: run a worker in this process."""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, OperationalError, connections

from ...checks import check_queues_served
from ...conf import owf_settings
from ...definitions.flow import DEFAULT_QUEUE
from ...definitions.registry import registry
from ...durations import parse_duration
from ...tables import workflow_tables_problem
from ...worker import reload
from ...worker.loop import Worker, WorkerUnhealthy
from ...worker.runner import backoff

if TYPE_CHECKING:
    from ...dispatch.sweeper import SweepLoop


def _duration(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None  # argparse prints it after the option's name
    return value


def _address(value: str) -> tuple[str, int]:
    """``[ADDR:]PORT`` as (address, port); the address defaults to the loopback one."""
    address, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"expected [ADDR:]PORT with a port from 1 to 65535, got {value!r}")
    return address.strip("[]") or "127.0.0.1", int(port)


class Command(BaseCommand):
    help = (
        "Claim and execute durable workflow runs until stopped (SIGTERM/SIGINT stop gracefully). "
        "A worker runs the code it started with: in development, --reload starts it again when a file changes."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--concurrency", type=int, default=None, help="worker slots (threads); default OPENWORKFLOW['CONCURRENCY']"
        )
        parser.add_argument(
            "--prefetch",
            type=int,
            default=None,
            help="runs claimed ahead of free slots, so a slot that finishes has its next run at once; "
            "default OPENWORKFLOW['PREFETCH'] (0)",
        )
        parser.add_argument("--lease", type=_duration, default=None, help="lease per claimed run, e.g. 30s")
        parser.add_argument("--poll", type=_duration, default=None, help="idle poll interval, e.g. 100ms")
        parser.add_argument(
            "--drain-timeout",
            type=_duration,
            default=None,
            help="on SIGTERM, wait this long for running slices, then release them to other workers and exit; "
            "default OPENWORKFLOW['DRAIN_TIMEOUT']",
        )
        parser.add_argument("--burst", action="store_true", help="exit once no run is due and none is in flight")
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="NAME",
            help=f"claim runs of this queue only (repeatable); '*' for every queue not paused; "
            f"default {DEFAULT_QUEUE!r}",
        )
        parser.add_argument(
            "--dispatch-only",
            action="store_true",
            help="with DISPATCH='celery': execute nothing, send Celery tasks for due runs every --poll (default 1s)",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="for development: start the worker again when a Python file it imported changes (Django's "
            "autoreloader, as runserver's); the runs in flight finish first (within --drain-timeout)",
        )
        parser.add_argument(
            "--metrics-port",
            type=_address,
            default=None,
            metavar="[ADDR:]PORT",
            help="serve this worker's Prometheus counters on http://ADDR:PORT/ (default address 127.0.0.1); "
            "needs OPENWORKFLOW['METRICS'] = True",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self._configure_logging(int(options["verbosity"]))
        # Arguments and settings are checked first: what they say is wrong needs no database.
        if options["metrics_port"] and not owf_settings.metrics:
            raise CommandError("--metrics-port needs OPENWORKFLOW['METRICS'] = True")
        if options["reload"] and not reload.in_child():
            sys.exit(reload.supervise())  # this process only starts the one that works, again after each change
        if options["dispatch_only"]:
            loop = self._sweep_loop(options["poll"])
            with loop.signals_handled():  # first, as for a worker: a signal while it starts up stops it too
                self._start(options["metrics_port"])
                logging.getLogger("django_openworkflow.dispatch").info(
                    "sweeping due runs to Celery every %ss", loop.interval
                )
                self._run(functools.partial(loop.run, install_signal_handlers=False), loop.stop, options["reload"])
            return
        worker = self._worker(options)
        # The worker's handlers go in before anything more starts (the code watcher of --reload says it
        # watches from a thread of its own): a Ctrl-C from here on drains the worker, with no traceback.
        with worker.signals_handled():
            self._start(options["metrics_port"])
            self._warn_unserved(worker.worker_id, worker.queues)
            served = ", ".join(f"{s.name}@{s.version}" if s.version else s.name for s in registry.all()) or "none"
            logging.getLogger("django_openworkflow.worker").info(
                "worker %s: database %s (%s), queues %s, concurrency %d, lease %ss, poll %sms, workflows: %s",
                worker.worker_id,
                owf_settings.database,
                worker.store.display_name,
                ", ".join(worker.queues),
                worker.concurrency,
                f"{worker.lease.total_seconds():g}",
                f"{worker.poll_interval.total_seconds() * 1000:g}",
                served,
            )
            run = functools.partial(worker.run, install_signal_handlers=False)
            try:
                self._run(run, worker.stop, options["reload"])
            except WorkerUnhealthy as exc:
                raise CommandError(f"worker {worker.worker_id} stopped: {exc}") from None

    def _run(self, run: Callable[[], None], stop: Callable[[], None], reloading: bool) -> None:
        """Run the loop; with ``--reload``, stop it when a file changes and exit for the parent to start anew."""
        if not reloading:
            run()
        elif reload.watch_while(run, stop):
            sys.exit(reload.RESTART_CODE)

    def _worker(self, options: dict[str, Any]) -> Worker:
        try:
            return Worker(
                concurrency=options["concurrency"],
                prefetch=options["prefetch"],
                lease=options["lease"],
                poll_interval=options["poll"],
                drain_timeout=options["drain_timeout"],
                burst=options["burst"],
                queues=options["queues"] or (DEFAULT_QUEUE,),
                prune=True,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None

    def _start(self, metrics_port: tuple[str, int] | None) -> None:
        """What both kinds of loop need before they start: the workflow tables, and the metrics' exporter."""
        self._require_workflow_tables()
        if metrics_port:
            self._serve_metrics(metrics_port)

    def _require_workflow_tables(self) -> None:
        """Refuse to start on a database without this app's migrations, saying what to run.

        Without them every claim fails ("no such table") and is retried
        forever. A database that does not answer yet (starting at the same
        time as the workers) is waited for, as the claims would be.
        """
        alias = owf_settings.database
        failures = 0
        while True:
            try:
                problem = workflow_tables_problem(alias)
                break
            except OperationalError as exc:  # cannot connect, or locked: transient
                failures += 1
                delay = backoff(failures)
                logging.getLogger("django_openworkflow.worker").warning(
                    "database %r did not answer (%s); looking for its migrations again in %.1fs", alias, exc, delay
                )
                connections[alias].close()
                time.sleep(delay)
            except DatabaseError as exc:  # e.g. no permission to read django_migrations: the claims will tell
                logging.getLogger("django_openworkflow.worker").warning(
                    "could not read which migrations are applied on database %r (%s); starting anyway", alias, exc
                )
                return
        if problem is not None:
            raise CommandError(f"cannot start: {problem}")

    def _warn_unserved(self, worker_id: str, queues: tuple[str, ...]) -> None:
        """The start-up check ``openworkflow.W090``: queues with due runs that no worker, this one included, serves."""
        try:
            found = check_queues_served(worker_id, queues)
        except DatabaseError as exc:  # not worth failing the start for: the admin and the metrics say it too
            logging.getLogger("django_openworkflow.worker").warning("could not look for unserved queues: %s", exc)
            return
        for message in found:
            if message.is_silenced():  # SILENCED_SYSTEM_CHECKS, as for the registered checks
                continue
            logging.getLogger("django_openworkflow.worker").warning("%s: %s %s", message.id, message.msg, message.hint)

    def _serve_metrics(self, where: tuple[str, int]) -> None:
        from ... import metrics

        address, port = where
        try:
            metrics.serve(port, address)
        except (ImportError, OSError) as exc:
            raise CommandError(f"--metrics-port {address}:{port}: {exc}") from None
        logging.getLogger("django_openworkflow.worker").info("metrics on http://%s:%d/metrics", address, port)

    def _sweep_loop(self, poll: str | None) -> SweepLoop:
        """``--dispatch-only``: the loop that sends due runs to Celery (``DISPATCH = "celery"``)."""
        from ...dispatch.sweeper import SweepLoop

        try:
            return SweepLoop(interval=parse_duration(poll or "1s").total_seconds())
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_openworkflow")
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler(self.stderr._out)  # type: ignore[call-overload]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
