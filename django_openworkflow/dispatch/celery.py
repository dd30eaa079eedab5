"""Celery dispatch: a Celery task claims one run by id and executes one slice of it.

The database decides; Celery is only transport. A message names a run, and
the task claims it only if it is due (fenced, the same lease rules as
``runworkflows``), so a duplicate, late or early message is harmless and a
lost one only delays the run until :func:`sweep` sends another.

This is the only module of the package that imports Celery. It is imported
when ``OPENWORKFLOW["DISPATCH"]`` names :class:`CeleryDispatcher` (``"celery"``),
at startup, so Celery workers know the tasks.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

import celery  # type: ignore[import-untyped]
from celery import Task, shared_task
from django.core import checks
from django.db import DatabaseError, connections, transaction

from ..client.dispatcher import Dispatcher
from ..conf import owf_settings
from ..definitions.flow import DEFAULT_QUEUE
from ..engine.execute import Outcome, SliceResult
from ..states import FINISHED_STATUSES, RunStatus
from ..store import get_backend
from ..store.records import ClaimedRun
from ..worker.runner import LeaseKeeper, SliceRunner, recycle_connections

logger = logging.getLogger("django_openworkflow.dispatch")

EXECUTE_RUN = "django_openworkflow.execute_run"
SWEEP = "django_openworkflow.sweep"

# A parked run due later than this gets no ETA message: Celery workers hold
# ETA messages in memory, and brokers with a visibility timeout (Redis, SQS:
# one hour by default) deliver them again once it passes. The sweep
# dispatches such runs when they come due.
ETA_HORIZON = timedelta(minutes=15)

# A sweep sends for a run due at a given time at most once per this interval
# (per process); the run's own message is likely still queued.
SWEEP_RESEND_AFTER = timedelta(seconds=30)
# Threads: Celery's thread pool may run sweeps and tasks side by side in one process.
_recently_swept: dict[tuple[Any, datetime], float] = {}  # guarded by _recently_swept_lock
_recently_swept_lock = threading.Lock()

# Claims that fail with a database error are retried this often, then left to the sweep.
_CLAIM_RETRIES = 5


class CeleryDispatcher(Dispatcher):
    """``DISPATCH = "celery"``: a started run sends a Celery task once the start commits; a sweep sends the rest."""

    def ready(self) -> None:
        pass  # importing this module registered the tasks

    def run_started(self, run_id: Any, queue: str = DEFAULT_QUEUE) -> None:
        dispatch_on_commit(run_id, queue)

    def sweep(self, limit: int) -> int:
        return sweep(limit)

    def check(self) -> list[checks.CheckMessage]:
        app = celery.current_app
        if app.conf.broker_url or app.conf.broker_write_url:
            return []
        return [
            checks.Error(
                f"OPENWORKFLOW['DISPATCH'] is 'celery' but the current Celery app ({app.main!r}) "
                "has no broker configured",
                hint="Create your project's Celery app (proj/celery.py: Celery('proj') with "
                "config_from_object('django.conf:settings', namespace='CELERY')), import it in "
                "proj/__init__.py so every process loads it, and set CELERY_BROKER_URL.",
                id="openworkflow.E012",
            )
        ]


class WorkflowTask(Task):
    """Base of the workflow tasks: routed to ``OPENWORKFLOW["CELERY_QUEUE"]``.

    A property rather than a class attribute, so the setting is read when
    a message is first sent (also by Celery beat, which sends by name).
    """

    @property
    def queue(self) -> str:
        return owf_settings.celery_queue


def celery_queue(queue: str) -> str:
    """The Celery queue of a workflow queue: ``CELERY_QUEUE`` for the default one, ``CELERY_QUEUE.<name>`` otherwise."""
    base = owf_settings.celery_queue
    return base if queue == DEFAULT_QUEUE else f"{base}.{queue}"


def send_execute_run(
    run_id: Any, countdown: float | None = None, due_at: datetime | None = None, queue: str = DEFAULT_QUEUE
) -> bool:
    """Send an ``execute_run`` message for ``run_id`` to its queue's Celery queue; False if the broker refused it.

    Never raises: the run is in the database, so a message that could not
    be sent only delays it until the sweep finds it.
    """
    try:
        execute_run.apply_async(
            args=[str(run_id)],
            kwargs={"due_at": due_at.isoformat()} if due_at is not None else {},
            countdown=countdown,
            queue=celery_queue(queue),
        )
    except Exception as exc:  # any broker failure: the database still has the run
        logger.warning("run %s: could not send its Celery task (%s); the sweep will dispatch it", run_id, exc)
        return False
    return True


def dispatch_on_commit(run_id: Any, queue: str = DEFAULT_QUEUE) -> None:
    """Send an ``execute_run`` message once the current transaction commits (at once outside one).

    Never before the commit: a worker must find the run when the message
    arrives, and a rolled-back start sends nothing.
    """
    transaction.on_commit(lambda: send_execute_run(run_id, queue=queue), using=owf_settings.database)


def sweep(limit: int = 1000) -> int:
    """Send ``execute_run`` for up to ``limit`` runs that are due now, oldest first; returns how many.

    Due means new, woken, retry due, or with an expired lease (its worker
    died): runs whose message was lost, delayed, or never scheduled (parks
    beyond ``ETA_HORIZON``). Read-only and safe to run on several machines at
    once: a duplicate message fails its claim and does nothing. A process
    does not send again for a run that is still due at the same time within
    ``SWEEP_RESEND_AFTER``, so a backlog of queued runs is not flooded with
    duplicates by frequent sweeps.
    """
    rows = get_backend().due_runs(limit)
    started = time.monotonic()
    with _recently_swept_lock:
        for key, sent_at in list(_recently_swept.items()):
            if started - sent_at > SWEEP_RESEND_AFTER.total_seconds():
                del _recently_swept[key]
        rows = [row for row in rows if row[:2] not in _recently_swept]
    sent = 0
    for run_id, available_at, queue in rows:
        if not send_execute_run(run_id, queue=queue):
            break  # the broker is down: the next sweep tries again
        with _recently_swept_lock:
            _recently_swept[(run_id, available_at)] = started
        sent += 1
    if sent:
        logger.info("sweep: dispatched %d due run(s)", sent)
    return sent


@shared_task(name=EXECUTE_RUN, base=WorkflowTask, bind=True, acks_late=True, ignore_result=True)
def execute_run(self: Task, run_id: str, due_at: str | None = None) -> str:
    """Claim run ``run_id`` if it is due and execute one slice of it; returns how that went.

    ``due_at`` is the wake time a delayed message was sent for; if the
    message arrives before the database clock reaches it, it is sent again
    for the remaining time.
    """
    # Connections that broke or aged out in an earlier task are replaced.
    # (Celery's Django fixup also closes every connection around each task.)
    recycle_connections()
    try:
        return _execute_run(self, run_id, due_at)
    finally:
        recycle_connections()


@shared_task(name=SWEEP, base=WorkflowTask, ignore_result=True)
def sweep_task(limit: int = 1000) -> int:
    """Celery beat entry point for :func:`sweep`; it also starts the runs of due cron schedules."""
    try:
        _beat_scheduler().tick()
        return sweep(limit)
    finally:
        recycle_connections()


@functools.cache
def _beat_scheduler() -> Any:
    """One per process: it syncs the schedule rows once; beat's period paces it (no interval of its own)."""
    from ..worker.schedules import Scheduler

    return Scheduler(interval=0)


def _worker_id() -> str:
    # One id per task execution, not per process: two threads of one process
    # must never share a lease, or fencing could not tell them apart.
    return f"celery:{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _execute_run(task: Task, run_id: str, due_at: str | None) -> str:
    lease = owf_settings.lease
    worker_id = _worker_id()
    try:
        claimed = get_backend().claim_run(run_id, worker_id, lease)
    except DatabaseError as exc:
        retries = task.request.retries
        if retries >= _CLAIM_RETRIES:
            logger.warning("run %s: could not claim it (%s); leaving it to the sweep", run_id, exc)
            return "claim-failed"
        delay = min(0.5 * 2**retries, 10.0)
        logger.warning("run %s: could not claim it (%s); retrying in %.1fs", run_id, exc, delay)
        raise task.retry(countdown=delay) from exc
    if claimed is None:
        logger.debug("run %s: not due, finished, or held by another worker: nothing to do", run_id)
        if due_at is not None:
            _send_again_if_early(run_id, datetime.fromisoformat(due_at))
        return "not-claimed"
    run = claimed.run
    leases = LeaseKeeper(get_backend(), worker_id, lease)
    with _Heartbeat(leases, claimed):
        result = _runner().run(claimed, leases.lease_valid(claimed))
    try:
        _dispatch_follow_ups(result)
    except DatabaseError as exc:
        logger.warning("run %s: could not dispatch what follows its slice (%s); the sweep will", run.id, exc)
    return str(result.outcome)


def _dispatch_follow_ups(result: SliceResult) -> None:
    """After a slice: wake the parent of a finished run, start new children, schedule the next slice.

    Reads the run's row rather than trusting ``result.wake_at``: a parent
    that parks on a child that has already finished is made due at once by
    the same commit, and only the row says so.
    """
    store = get_backend()
    if result.woke is not None:
        woken_id, queue = result.woke
        send_execute_run(woken_id, queue=queue)
    if result.spawned or result.outcome == Outcome.PARKED:
        # The slice may have started children (run_workflow, start_workflow) or a successor.
        for started, queue in store.due_children(result.run_id):
            send_execute_run(started, queue=queue)
    state = store.dispatch_state(result.run_id)
    if state is None:
        return
    if state.status in FINISHED_STATUSES:
        if state.parent_run_id is not None:
            # Due only if it is parked on this very child; otherwise the claim fails quietly.
            send_execute_run(state.parent_run_id, queue=state.parent_queue or DEFAULT_QUEUE)
        return
    if state.status == RunStatus.RUNNING and state.worker_id is None:
        _schedule(result.run_id, state.available_at, store.now(), state.queue)


def _schedule(run_id: Any, available_at: datetime, now: datetime, queue: str = DEFAULT_QUEUE) -> None:
    """Send a message that arrives when the parked run is due (if that is within ``ETA_HORIZON``)."""
    # A countdown measured on the database clock, not an ETA: Celery applies
    # it on the sender's clock, so a skew between the two clocks cancels out.
    delay = (available_at - now).total_seconds()
    if delay > ETA_HORIZON.total_seconds():
        logger.debug("run %s: due at %s, beyond the ETA horizon; the sweep will dispatch it", run_id, available_at)
        return
    if delay <= 0:
        send_execute_run(run_id, queue=queue)
    else:
        send_execute_run(run_id, countdown=delay, due_at=available_at, queue=queue)


def _send_again_if_early(run_id: str, due_at: datetime) -> None:
    """A delayed message arrived before its run came due (clock skew): send it again for the rest.

    Only while the run is still parked until that very time, so a stale
    message from an earlier park, or a duplicate, ends here.
    """
    store = get_backend()
    state = store.dispatch_state(run_id)
    if state is None or state.status != RunStatus.RUNNING or state.worker_id is not None:
        return  # finished, gone, or held: not parked
    if state.available_at != due_at:
        return
    now = store.now()
    if state.available_at > now:
        _schedule(run_id, state.available_at, now, state.queue)


@functools.cache
def _runner() -> SliceRunner:
    return SliceRunner(get_backend(), logger)


class _Heartbeat:
    """Renews the lease of one claimed run every lease/3 while its slice executes, on its own thread.

    Its LeaseKeeper is the task's own; the keeper guards what the task's
    thread and this one share.
    """

    def __init__(self, leases: LeaseKeeper, claimed: ClaimedRun) -> None:
        self.leases = leases
        self.claimed = claimed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"owf-heartbeat-{claimed.run.id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        # Never ends silently before the slice does: a round that raises is logged and
        # the next one tries again; the slice's lease check stops it if none succeeds.
        try:
            while not self._stop.wait(self.leases.interval.total_seconds()):
                try:
                    if self.leases.renew([self.claimed]) == 0:
                        return  # canceled or taken over: the slice's next write finds out
                except Exception:
                    logger.exception("run %s: heartbeat failed; trying again", self.claimed.run.id)
                    with contextlib.suppress(Exception):  # the handler itself must not end the thread
                        recycle_connections()
        finally:
            connections.close_all()  # this thread's connection, if it opened one
