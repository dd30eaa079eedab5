"""A worker's database connections: the heartbeat's, opened first and kept, and no more slots than fit.

Each slot thread keeps a connection of its own, and so does the heartbeat
(the supervisor thread). If slots could take every connection the database
allows, the heartbeat could not renew the leases, and other workers would
take the runs over and run their steps a second time (issue 41). So the
heartbeat opens its connection before any slot starts (the main thread
waits for it, :func:`open_heartbeat_connection`), and the worker starts no
more slots than the database has room for (:func:`slots_that_fit`).

Both functions run on one thread each and keep no state of their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import DatabaseError

from ..store.backends.base import Backend
from .runner import backoff, recycle_connections

logger = logging.getLogger("django_openworkflow.worker")


def open_heartbeat_connection(store: Backend, stopped: Callable[[], bool], wait: Callable[[float], object]) -> bool:
    """Open the heartbeat thread's connection, trying until it opens or ``stopped()``; True once it is open.

    ``wait(seconds)`` sleeps between tries and returns early when the
    worker stops. False on an error that trying again cannot mend (a
    setting): the heartbeat thread then ends, and the claim loop's health
    check stops the worker.
    """
    failures = 0
    while not stopped():
        try:
            store.open_connection()
            return True
        except DatabaseError as exc:
            failures += 1
            delay = backoff(failures)
            logger.error(
                "the heartbeat could not open its database connection (%s): this worker claims nothing until "
                "it can; trying again in %.1fs",
                exc,
                delay,
            )
            recycle_connections()
            wait(delay)
        except Exception:
            logger.exception("the heartbeat could not open its database connection")
            return False
    return True  # stopped: the main thread sees it and claims nothing


def heartbeat_connected(ready: threading.Event, heartbeat: threading.Thread, stopping: threading.Event) -> bool:
    """Wait until the heartbeat has its connection (``ready``: True), or until the worker is stopped (False).

    A heartbeat thread that died meanwhile: True, and the claim loop's first
    health check stops the worker.
    """
    while not ready.wait(0.1):
        if stopping.is_set():
            return False
        if not heartbeat.is_alive():
            return True
    return not stopping.is_set()


def slots_that_fit(store: Backend, wanted: int, beside: int) -> int:
    """How many slots to start: ``wanted``, or fewer when the database accepts fewer connections.

    ``beside``: connections the worker keeps besides its slots' and those
    already open (the periodic sweepers keep one each). A slot that cannot
    open a connection hands its run back and the run waits out a backoff:
    slots beyond what the database accepts only churn. The count is the
    server's own, read once at start: other processes' connections come and
    go meanwhile, so this is a guard, and the heartbeat's connection (opened
    first, and kept) is what keeps the leases safe.
    """
    try:
        room = store.connection_room()
    except DatabaseError as exc:  # a role that may not read the counts: the slots as asked
        logger.debug("could not read how many connections the database accepts (%s)", exc)
        recycle_connections()
        return wanted
    if room is None:
        return wanted
    free = room.free - beside
    if free >= wanted:
        return wanted
    fitted = max(1, free)
    logger.warning(
        "only %d slot(s) instead of %d: the database accepts %d more connection(s) (%s is %d) and each slot "
        "keeps one; raise that limit, or run fewer slots per worker (runworkflows --concurrency, "
        "OPENWORKFLOW['CONCURRENCY'])",
        fitted,
        wanted,
        max(0, room.free),
        room.what,
        room.limit,
    )
    return fitted
