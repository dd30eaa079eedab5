"""A worker's heartbeat row, and the queues it claims from: its own, with ``"*"`` expanded and paused ones left out.

Written by the worker's main thread before its claim loop starts
(:meth:`Presence.start`) and after it ended (:meth:`Presence.stop`), and in
between by the supervisor thread only, at each heartbeat (:meth:`Presence.beat`),
beside the lease renewal: no thread of its own. The claim loop reads
:attr:`Presence.claim_queues`, which only those writers rebind (a tuple,
replaced whole: rebinding an attribute is atomic), so a pause or resume
takes effect within one heartbeat and costs the claim nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from datetime import timedelta

from django.db import DatabaseError

from .. import __version__
from ..definitions.registry import registry
from ..store import workers
from .runner import recycle_connections

logger = logging.getLogger("django_openworkflow.worker")


class Presence:
    """One worker's row in ``openworkflow_worker`` and its view of the paused queues."""

    def __init__(self, worker_id: str, served: Sequence[str], slots: int, heartbeat: timedelta) -> None:
        self.worker_id = worker_id
        self.served = tuple(served)
        self.slots = slots  # the worker lowers it before start() when the database accepts fewer connections
        self.heartbeat = heartbeat
        # Until start() reads the database: the queues named (for "*", the declared ones), nothing paused.
        self.claim_queues: tuple[str, ...] = workers.claimable_queues(self.served, set(), self._declared(), read=False)
        self.paused: frozenset[str] = frozenset()  # rebound with claim_queues, by the same threads
        self._registered = False  # written by whichever thread writes the row (never two at once)
        self._next_prune = 0.0  # the supervisor's only, after start()
        # Set by stop(): a heartbeat stuck in the database until after it (an unhealthy worker's
        # exit does not wait for it) must not write the row live again.
        self._stopped = threading.Event()

    @staticmethod
    def _declared() -> list[str]:
        return [spec.queue for spec in registry.all()]

    def start(self) -> None:
        """Write this worker's row and read the paused queues; a database error is logged, the worker starts anyway."""
        try:
            workers.register(
                self.worker_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                version=__version__,
                queues=self.served,
                slots=self.slots,
                heartbeat=self.heartbeat,
            )
            self._registered = True
            self._refresh()
        except DatabaseError as exc:
            logger.warning("could not write this worker's heartbeat row (%s); trying again at the next heartbeat", exc)
            recycle_connections()

    def beat(self, busy: int) -> None:
        """At each heartbeat: seen now with ``busy`` slots busy; the paused queues read again; old rows pruned.

        A database error is logged and the previous queues kept: the lease
        renewal beside it decides whether the worker is still healthy.
        """
        if self._stopped.is_set():
            return
        try:
            if not self._registered or not workers.beat(self.worker_id, busy):
                self.start()  # the row was never written, or pruned while this worker was frozen
                return
            self._refresh()
            now = time.monotonic()
            if now >= self._next_prune:
                self._next_prune = now + workers.PRUNE_EVERY.total_seconds()
                workers.prune_gone()
        except DatabaseError as exc:
            logger.warning("heartbeat row not written (%s); the paused queues are read again next time", exc)
            recycle_connections()

    def _refresh(self) -> None:
        paused = workers.paused_queues()
        queues = workers.claimable_queues(self.served, paused, self._declared())
        newly = paused & set(self.served) - self.paused
        if newly:
            logger.info("queue(s) %s paused: not claimed until resumed", ", ".join(sorted(newly)))
        resumed = self.paused & set(self.served) - paused
        if resumed:
            logger.info("queue(s) %s resumed", ", ".join(sorted(resumed)))
        self.claim_queues, self.paused = queues, frozenset(paused)

    def stop(self) -> None:
        """A clean stop: the row says so, so the admin shows this worker's queues without it at once."""
        self._stopped.set()
        try:
            workers.mark_stopped(self.worker_id)
        except DatabaseError as exc:
            logger.warning("could not mark this worker stopped (%s); it reads as dead after a few heartbeats", exc)


class Unlisted(Presence):
    """A worker on a store without the workers' table (the in-memory backend): its queues as named, no row.

    Nothing is paused (pausing is a row in that table) and nothing is written.
    """

    def start(self) -> None:
        """No row to write."""

    def beat(self, busy: int) -> None:
        """No row to refresh, no paused queue to read."""

    def stop(self) -> None:
        """No row to mark stopped."""
