"""The worker: claim due runs in batches, execute them on slot threads, heartbeat, stop cleanly.

One main thread claims; ``concurrency`` slot threads execute slices, each
with its own Django connection that it keeps across slices; one heartbeat
thread extends the leases of the runs in flight with a single UPDATE. The
heartbeat opens its connection before any slot opens one, and keeps it;
and there are no more slots than the database accepts connections (read
at start), so slots can never take the heartbeat's place.

A worker that cannot renew its leases for most of a lease is no longer safe:
other workers may take its runs over and run their steps a second time. It
stops claiming, hands back what it can, and :meth:`Worker.run` raises
:class:`WorkerUnhealthy`, so that ``runworkflows`` exits non-zero and a
process manager starts a fresh one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connections

from ..conf import owf_settings
from ..definitions.flow import DEFAULT_QUEUE, check_queue
from ..durations import Duration, parse_duration
from ..store import get_backend
from ..store.backends.base import Backend
from ..store.notify import DUE_CHANNEL, Listener
from ..store.records import ClaimedRun
from ..store.workers import ALL_QUEUES
from .connections import heartbeat_connected, open_heartbeat_connection, slots_that_fit
from .presence import Presence, Unlisted
from .runner import LeaseKeeper, SliceRunner, backoff, recycle_connections
from .signals import relayed_signals

logger = logging.getLogger("django_openworkflow.worker")


class WorkerUnhealthy(RuntimeError):
    """The worker stopped because it could no longer keep its leases (or its heartbeat thread died)."""


class Worker:
    """Executes workflow runs from the database until stopped.

    ``run()`` blocks; ``stop()`` (or SIGTERM/SIGINT when ``run`` installs
    handlers) stops claiming, lets in-flight slices finish and returns. A
    second signal exits the process at once.
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        prefetch: int | None = None,
        lease: Duration | None = None,
        poll_interval: Duration | None = None,
        drain_timeout: Duration | None = None,
        burst: bool = False,
        worker_id: str | None = None,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        prune: bool = False,
        store: Backend | None = None,
    ) -> None:
        """``store``: where runs are claimed and written; by default the workflow database's backend
        (``get_backend()``). A test may pass the in-memory one (``testing.memory.InMemoryBackend``):
        the loop, its slots, heartbeats and prefetch then run with no database at all."""
        # Slots: as asked, or fewer when the database accepts fewer connections (rebound by
        # the main thread before any slot starts: connections.slots_that_fit).
        self.concurrency = owf_settings.concurrency if concurrency is None else int(concurrency)
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.prefetch = owf_settings.prefetch if prefetch is None else int(prefetch)
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be at least 0, got {self.prefetch}")
        # With runs held ahead, claim again once half of them have started, not at every slot that
        # frees: claims of several runs instead of one per run. While fewer are free, at least one
        # held run waits for a slot, so none idles.
        self.claim_at_least = max(1, self.prefetch // 2)
        self.lease: timedelta = parse_duration(owf_settings.lease if lease is None else lease)
        if self.lease < timedelta(seconds=1):
            raise ValueError(f"lease must be at least 1s, got {self.lease}")
        self.poll_interval = parse_duration(owf_settings.poll_interval if poll_interval is None else poll_interval)
        self.drain_timeout = parse_duration(owf_settings.drain_timeout if drain_timeout is None else drain_timeout)
        self.burst = burst
        # "*": every queue not paused (presence.py expands it at each heartbeat).
        named = dict.fromkeys(
            name if name == ALL_QUEUES else check_queue(name, "runworkflows --queue") for name in queues
        )
        self.queues = tuple(named) or (DEFAULT_QUEUE,)
        self.store = get_backend() if store is None else store
        self.worker_id = worker_id or f"{socket.gethostname()[:30]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # Threads: the main thread claims, slot threads execute, the supervisor
        # ("owf-heartbeat") renews leases and replaces dead slots. What more
        # than one of them touches is guarded by _lock, or is a thread-safe
        # queue or Event, or is written by one thread only (said beside it).
        self.slices_done = 0  # guarded by _lock
        self._slots: queue.SimpleQueue[ClaimedRun | None] = queue.SimpleQueue()
        self._in_flight: dict[Any, ClaimedRun] = {}  # guarded by _lock
        self._slot_threads: dict[str, threading.Thread] = {}  # guarded by _lock
        self._slot_runs: dict[str, ClaimedRun] = {}  # what each slot thread is executing; guarded by _lock
        self.runner = SliceRunner(self.store, logger)
        self.leases = LeaseKeeper(self.store, self.worker_id, self.lease)
        # The heartbeat row and the queues claimed from now (paused ones left out): see presence.py.
        presence = Presence if self.store.keeps_worker_rows else Unlisted
        self.presence = presence(self.worker_id, self.queues, self.concurrency, self.leases.interval)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._due_listener: Listener | None = None  # set by run(), before the claim loop starts
        self._asked_pid: int | None = None  # see _ask_for_wakeups; the claim loop's thread only
        self._stopping = threading.Event()
        self._supervisor_stop = threading.Event()
        self._supervisor: threading.Thread | None = None  # the main thread's only
        self._heartbeat_ready = threading.Event()  # the supervisor opened its connection (or ended)
        self._begun = threading.Event()  # the main thread started the slots: the supervisor may beat
        self.failure: str | None = None  # why the worker stopped unhealthy; written by the main thread only
        self._lapsed: str | None = None  # a slice outlived its lease unrenewed (see _slot_loop); guarded by _lock
        from .schedules import Scheduler

        self.scheduler = Scheduler()  # cron schedules: every worker looks, the tick's key picks one run
        # Retention's sweep (retention.py) and priority aging's (aging.py): each on a thread of its own, one
        # worker per interval (runworkflows turns them on). Started and stopped by the main thread only.
        from .maintenance import sweepers

        self.sweepers = sweepers() if prune else []

    # -- control --

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once in-flight slices have finished (or the drain timeout passed)."""
        self._stopping.set()
        self._wake.set()

    def _signalled(self, signum: int) -> None:
        """SIGTERM or SIGINT, on the "owf-signals" thread (worker/signals.py): drain, then return from run()."""
        with self._lock:
            in_flight = len(self._in_flight)
        logger.info(
            "%s received: finishing %d in-flight run(s) within %gs, then exiting",
            signal.Signals(signum).name,
            in_flight,
            self.drain_timeout.total_seconds(),
        )
        self.stop()

    # -- main loop --

    @contextlib.contextmanager
    def signals_handled(self) -> Iterator[None]:
        """Inside, SIGTERM and SIGINT stop this worker (a second exits at once); outside, the handlers before.

        ``run()`` installs them itself; ``runworkflows`` installs them first,
        so that a Ctrl-C while it starts up (before ``run()``) drains too.
        Only the main thread can: elsewhere this does nothing.
        """
        with relayed_signals(self._signalled, second_exits=True):
            yield

    def run(self, until: Callable[[], bool] | None = None, install_signal_handlers: bool = True) -> None:
        """Claim and execute runs until stopped (or ``until()`` is true, or burst work is done)."""
        with self.signals_handled() if install_signal_handlers else contextlib.nullcontext():
            self._run(until)

    def _run(self, until: Callable[[], bool] | None) -> None:
        # The heartbeat first: its connection is opened before any slot's, and kept, so that slots
        # that outnumber the connections the database allows can never starve it (issue 41: a
        # heartbeat that cannot connect lets every lease run out, and other workers run the steps
        # a second time).
        supervisor = self._supervisor = threading.Thread(target=self._supervise, name="owf-heartbeat", daemon=True)
        supervisor.start()
        listener: Listener | None = None
        sweeping = 0  # how many sweepers were started, to stop and join
        try:
            # Stopped before the heartbeat could connect: nothing to claim, nothing was claimed.
            if heartbeat_connected(self._heartbeat_ready, supervisor, self._stopping):
                # Where the database notifies (PostgreSQL), a committed start, wake-up or
                # retry wakes the claim loop at once instead of at the next poll.
                # Polling stays as the safety net.
                listener = self._due_listener = self.store.listener(
                    [DUE_CHANNEL], lambda channel, payload: self._wake.set()
                )
                if listener is not None:
                    listener.start()
                    # LISTEN before the first claim, so nothing committed in between is missed.
                    listener.connected.wait(2.0)
                # Once this thread's, the heartbeat's and the listener's connections are open.
                self.concurrency = self.presence.slots = slots_that_fit(
                    self.store, self.concurrency, beside=len(self.sweepers)
                )
                self.presence.start()  # before the supervisor's first beat: this thread is its only writer until then
                for i in range(self.concurrency):
                    self._start_slot(f"owf-slot-{i}")
                self._begun.set()
                for sweeper in self.sweepers:
                    sweeper.start()
                    sweeping += 1
                self._claim_loop(until)
        finally:
            self._stopping.set()
            for sweeper in self.sweepers[:sweeping]:
                sweeper.stop()
            if listener is not None:
                self._ask_for_wakeups(False)
                listener.stop()
                listener.join(5)
            self._drain()
            self._supervisor_stop.set()
            # Bounded: a supervisor stuck in a database call must not keep an unhealthy worker alive.
            supervisor.join(None if self.failure is None else self.lease.total_seconds())
            if self.failure is None:
                self._release_stuck()
                self.presence.stop()
            else:
                _bounded(self._release_stuck, self.lease.total_seconds(), "releasing the runs still executing")
                _bounded(self.presence.stop, self.lease.total_seconds(), "marking this worker stopped")
            for sweeper in self.sweepers[:sweeping]:
                sweeper.join(5)
            connections.close_all()
        logger.info("worker %s stopped after %d slice(s)", self.worker_id, self.slices_done)
        if self.failure is not None:
            raise WorkerUnhealthy(self.failure)

    def _drain(self) -> None:
        """Hand back the runs claimed ahead; let the slots finish their slices, for at most the drain timeout."""
        self._release_prefetched()
        with self._lock:
            threads = list(self._slot_threads.values())
        for _ in threads:
            self._slots.put(None)
        give_up = time.monotonic() + self.drain_timeout.total_seconds()
        for thread in threads:
            thread.join(max(0.0, give_up - time.monotonic()))

    def _release_prefetched(self) -> None:
        """The runs claimed ahead that no slot has taken yet: released at once, for another worker to claim."""
        while True:
            try:
                claimed = self._slots.get_nowait()
            except queue.Empty:
                return
            if claimed is None:  # not put there before the drain; kept for the slot it was meant for
                self._slots.put(None)
                return
            with self._lock:
                self._in_flight.pop(claimed.run.id, None)
            try:
                self.store.release(claimed, timedelta(0))
            except DatabaseError as exc:  # its lease expires instead, and another worker takes it then
                logger.warning("run %s: could not release it (%s); its lease will expire", claimed.run.id, exc)
                recycle_connections()

    def _release_stuck(self) -> None:
        """After the drain timeout: hand back what slots are still executing, so another worker takes it now.

        Their threads cannot be stopped (Python has no way to kill one); they
        die with the process, and anything they would still write is fenced
        out. A step that was running will run again elsewhere.
        """
        with self._lock:
            stuck = list(self._slot_runs.values())
        for claimed in stuck:
            logger.warning(
                "run %s (%s) still executing after the %gs drain timeout: releasing it to other workers",
                claimed.run.id,
                claimed.run.workflow_name,
                self.drain_timeout.total_seconds(),
            )
            self.store.release(claimed, timedelta(0))

    def _claim_loop(self, until: Callable[[], bool] | None) -> None:
        errors = 0
        poll = self.poll_interval.total_seconds()
        while not self._stopping.is_set():
            # Clear before looking for work: a wake-up (notification, freed slot)
            # that arrives from here on makes the next wait return at once.
            self._wake.clear()
            if until is not None and until():
                return
            failure = self._health()
            if failure is not None:
                self.failure = failure
                logger.critical("%s: stopping this worker; start a new one (a process manager restarts it)", failure)
                return
            self.scheduler.tick()  # at most once a second, never raises
            with self._lock:
                # Held runs: executing, or claimed ahead (prefetch) and waiting in _slots for a slot.
                free = self.concurrency + self.prefetch - len(self._in_flight)
            if free < self.claim_at_least:
                self._ask_for_wakeups(False)  # a notification could not be acted on: spare the writers
                self._wake.wait(poll)
                continue
            # Burst mode stops when a claim finds nothing and no slot was busy BEFORE it: a slot
            # that finishes during the claim may have parked its run for now (a sleep of 0),
            # after the claim looked, so it is looked for once more.
            with self._lock:
                idle = not self._in_flight
            queues = self.presence.claim_queues  # rebound by the heartbeat: a pause holds from the next claim
            if not queues:  # every queue this worker serves is paused
                if self.burst and idle:
                    return
                self._wake.wait(poll)
                continue
            try:
                claimed = self.store.claim(self.worker_id, free, self.lease, queues)
                errors = 0
            except DatabaseError as exc:
                errors += 1
                delay = backoff(errors)
                logger.warning("claim failed (%s); retrying in %.1fs", exc, delay)
                recycle_connections()
                self._stopping.wait(delay)
                continue
            with self._lock:
                for item in claimed:
                    self._in_flight[item.run.id] = item
            for item in claimed:
                self._slots.put(item)
            if len(claimed) == free:
                self._ask_for_wakeups(False)  # there is more work: the next claim comes at once anyway
                continue
            if self.burst and not claimed and idle:
                return
            if self._ask_for_wakeups(True):
                # Asked just now: a run committed before the request took effect notified
                # nobody, so look once more before waiting.
                continue
            self._wake.wait(poll)

    def _ask_for_wakeups(self, on: bool) -> bool:
        """Ask the database to notify new due runs (``on``: idle slots wait) or to stop; True if it asked now.

        On PostgreSQL every notifying commit takes one server-wide lock: a
        worker asks only while it waits with free slots. ``_asked_pid`` (the
        listener connection the request names, confined to the claim loop's
        thread) avoids writing the same request twice; a reconnected listener
        has a new pid, so the request is made again.
        """
        listener = self._due_listener
        pid = getattr(listener, "backend_pid", None) if listener is not None else None
        want = pid if on else None
        if listener is None or want == self._asked_pid:
            return False
        try:
            if self.store.want_wakeups(listener, DUE_CHANNEL, self.worker_id, on) is False:
                return False  # this database notifies without being asked
        except DatabaseError as exc:
            # Not fatal: the worker still polls. Not retried until the next change of mind.
            logger.warning("could not %s wake-ups (%s); polling meanwhile", "ask for" if on else "stop", exc)
            recycle_connections()
        self._asked_pid = want
        return on

    # -- slots --

    def _start_slot(self, name: str) -> None:
        thread = threading.Thread(target=self._slot_loop, name=name, daemon=True)
        with self._lock:
            self._slot_threads[name] = thread
        thread.start()

    def _slot_loop(self) -> None:
        name = threading.current_thread().name
        try:
            while True:
                claimed = self._slots.get()
                if claimed is None:
                    return
                with self._lock:
                    self._slot_runs[name] = claimed
                try:
                    self.runner.run(claimed, self.leases.lease_valid(claimed))
                except BaseException:  # nothing that happens to one run may take the slot down
                    logger.exception("run %s: slot %s failed; releasing the run", claimed.run.id, name)
                    recycle_connections()
                    self.store.release(claimed)
                finally:
                    # A slice that ended after its lease lapsed unrenewed: the heartbeat is not
                    # keeping up, even if the run is gone from the in-flight list by now.
                    lapsed = self._lapse_message() if self.leases.lapsed(claimed) else None
                    with self._lock:
                        self._lapsed = self._lapsed or lapsed
                        self._in_flight.pop(claimed.run.id, None)
                        self._slot_runs.pop(name, None)
                        self.slices_done += 1
                    self._wake.set()
                    recycle_connections()
        finally:
            connections.close_all()

    # -- supervision: heartbeats, slots --

    def _supervise(self) -> None:
        """Renew the leases of the runs in flight every lease/3, with the heartbeat row; replace dead slot threads.

        First opens the connection it renews with, before any slot opens one
        (the main thread waits for it), and keeps it. Never ends before it is
        told to: whatever one round raises is logged, and the next round tries
        again. If rounds keep failing, leases go unrenewed and the claim loop
        (:meth:`_health`) stops the worker.
        """
        interval = self.leases.interval.total_seconds()
        tick = min(interval, 1.0)
        try:
            opened = open_heartbeat_connection(
                self.store, lambda: self._supervisor_stop.is_set() or self._stopping.is_set(), self._stopping.wait
            )
            self._heartbeat_ready.set()
            if not opened:
                return
            # The main thread starts the slots and writes the heartbeat row meanwhile.
            while not self._begun.wait(tick):
                if self._supervisor_stop.is_set():
                    return
            next_beat = time.monotonic() + interval
            while not self._supervisor_stop.wait(tick):
                try:
                    self._replace_dead_slots()
                    now = time.monotonic()
                    if now >= next_beat:
                        # From now, not from the missed beat: after a stall, one renewal, not a burst.
                        next_beat = now + interval
                        with self._lock:
                            held = list(self._in_flight.values())
                            busy = len(self._slot_runs)
                        self.leases.renew(held)
                        self.presence.beat(busy)
                except Exception:
                    logger.exception("heartbeat round failed; trying again in %gs", tick)
                    with contextlib.suppress(Exception):  # the handler itself must not end the thread
                        recycle_connections()
        finally:
            self._heartbeat_ready.set()  # never leave the main thread waiting on a thread that ended
            connections.close_all()

    def _health(self) -> str | None:
        """Why this worker can no longer be trusted with runs, or None while it can."""
        supervisor = self._supervisor
        if supervisor is not None and not supervisor.is_alive() and not self._supervisor_stop.is_set():
            return "the heartbeat thread died: no lease is renewed any more"
        with self._lock:
            in_flight = list(self._in_flight.values())
            lapsed = self._lapsed
        if any(self.leases.lapsed(claimed) for claimed in in_flight):
            return self._lapse_message()
        return lapsed

    def _lapse_message(self) -> str:
        seconds = time.monotonic() - self.leases.renewed_at
        return (
            f"could not renew the leases of the runs in flight for {seconds:.1f}s "
            f"(the lease is {self.lease.total_seconds():g}s): other workers may take them over"
        )

    def _replace_dead_slots(self) -> None:
        """A slot thread that died anyway: stop renewing its run's lease (so another worker takes it), start another."""
        if self._stopping.is_set():
            return
        with self._lock:
            dead = [name for name, thread in self._slot_threads.items() if not thread.is_alive()]
            lost = [self._slot_runs.pop(name) for name in dead if name in self._slot_runs]
            for claimed in lost:
                self._in_flight.pop(claimed.run.id, None)
        for claimed in lost:
            logger.error(
                "run %s: its slot thread died; its lease will expire and another worker take it", claimed.run.id
            )
        for name in dead:
            logger.error("slot %s died; starting a new one", name)
            self._start_slot(name)


def _bounded(call: Callable[[], None], seconds: float, what: str) -> None:
    """Run ``call`` on a thread of its own for at most ``seconds`` (a database that hangs cannot hold the exit)."""

    def target() -> None:
        try:
            call()
        except Exception:
            logger.exception("%s failed", what)
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="owf-exit", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        logger.warning("%s did not finish within %gs; exiting anyway", what, seconds)
