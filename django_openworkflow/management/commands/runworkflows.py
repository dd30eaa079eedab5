"""``manage.py runworkflows``: run a worker in this process."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from ...conf import owf_settings
from ...durations import parse_duration
from ...flow import DEFAULT_QUEUE
from ...registry import registry
from ...worker import Worker, WorkerUnhealthy


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
    help = "Claim and execute durable workflow runs until stopped (SIGTERM/SIGINT stop gracefully)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--concurrency", type=int, default=None, help="worker slots (threads); default OPENWORKFLOW['CONCURRENCY']"
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
            help=f"claim runs of this queue only (repeatable); default {DEFAULT_QUEUE!r}",
        )
        parser.add_argument(
            "--dispatch-only",
            action="store_true",
            help="with DISPATCH='celery': execute nothing, send Celery tasks for due runs every --poll (default 1s)",
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
        if options["metrics_port"]:
            self._serve_metrics(options["metrics_port"])
        if options["dispatch_only"]:
            self._dispatch_only(options["poll"])
            return
        try:
            worker = Worker(
                concurrency=options["concurrency"],
                lease=options["lease"],
                poll_interval=options["poll"],
                drain_timeout=options["drain_timeout"],
                burst=options["burst"],
                queues=options["queues"] or (DEFAULT_QUEUE,),
                prune=True,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
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
        try:
            worker.run()
        except WorkerUnhealthy as exc:
            raise CommandError(f"worker {worker.worker_id} stopped: {exc}") from None

    def _serve_metrics(self, where: tuple[str, int]) -> None:
        from ... import metrics

        if not owf_settings.metrics:
            raise CommandError("--metrics-port needs OPENWORKFLOW['METRICS'] = True")
        address, port = where
        try:
            metrics.serve(port, address)
        except (ImportError, OSError) as exc:
            raise CommandError(f"--metrics-port {address}:{port}: {exc}") from None
        logging.getLogger("django_openworkflow.worker").info("metrics on http://%s:%d/metrics", address, port)

    def _dispatch_only(self, poll: str | None) -> None:
        from ...dispatch.sweeper import SweepLoop

        try:
            loop = SweepLoop(interval=parse_duration(poll or "1s").total_seconds())
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        logging.getLogger("django_openworkflow.dispatch").info("sweeping due runs to Celery every %ss", loop.interval)
        loop.run()

    def _configure_logging(self, verbosity: int) -> None:
        logger = logging.getLogger("django_openworkflow")
        if logger.handlers or logging.getLogger().handlers:
            return
        handler = logging.StreamHandler(self.stderr._out)  # type: ignore[call-overload]
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel({0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG))
