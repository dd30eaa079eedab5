"""A public write chosen as a deadlock's victim is written again, whole: its caller sees no database error.

Each test makes the deadlock happen, on the real database, in the order a
busy worker makes it: another transaction (the "worker") holds a row the
write will need, waits until the write is blocked on it, then asks for a row
the write already holds. The database aborts one of the two; the worker's
transaction is made the heavier (it has changed more rows), so the write is
the one aborted (PostgreSQL aborts the first waiter, MariaDB the lighter).
That the worker got the write's row at all proves the write was aborted; the
write's answer proves it was tried again. SQLite writes one transaction at a
time and has no row locks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections, transaction

from django_openworkflow import send_event, send_signal
from django_openworkflow.models import Event, Signal, StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import CEILING, wait_until

VENDOR = connections[get_backend().alias].vendor

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(VENDOR == "sqlite", reason="SQLite has no row locks: one writer at a time"),
]


def session_id() -> int:
    """This thread's database session, as the server numbers it."""
    with connections[get_backend().alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()" if VENDOR == "postgresql" else "SELECT CONNECTION_ID()")
        return int(cursor.fetchone()[0])


def waits_on_a_lock(session: int) -> bool:
    """Whether ``session`` waits for a row lock, read on a connection of its own.

    (PostgreSQL's pg_stat_activity is read once per transaction, so not on the worker's.)
    """
    observer = connections.create_connection(get_backend().alias)
    try:
        with observer.cursor() as cursor:
            if VENDOR == "postgresql":
                cursor.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", [session])
            else:
                cursor.execute(
                    "SELECT trx_state = 'LOCK WAIT' FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = %s",
                    [session],
                )
            row = cursor.fetchone()
            return bool(row and row[0])
    finally:
        observer.close()


def heavy_work(run: WorkflowRun) -> None:
    """Change twenty rows: MariaDB aborts the transaction that changed fewer, so not this one."""
    StepAttempt.objects.filter(workflow_run=run).update(output={"weight": 1})


def ballast() -> WorkflowRun:
    """A run of twenty finished steps for the worker's transaction to change."""
    run = WorkflowRun.objects.create(
        workflow_name="ballast", status="completed", input={}, available_at=get_backend().now()
    )
    StepAttempt.objects.bulk_create(
        StepAttempt(workflow_run=run, step_name=f"s:{n}", kind="run", status="completed") for n in range(20)
    )
    return run


class Worker(threading.Thread):
    """A transaction on a thread of its own: ``first()``, then (once the write waits on it) ``then()``."""

    def __init__(self, first: Callable[[], Any], then: Callable[[], Any], write_session: int) -> None:
        super().__init__(daemon=True)
        self.first, self.then, self.write_session = first, then, write_session
        self.holding = threading.Event()
        self.outcome: str | None = None  # confined: written by this thread, read after join()

    def run(self) -> None:
        try:
            with transaction.atomic(using=get_backend().alias):
                self.first()
                self.holding.set()
                # Every 0.25 s: MariaDB refreshes INNODB_TRX only when nobody read it for 0.1 s.
                wait_until(lambda: waits_on_a_lock(self.write_session), timeout=CEILING, interval=0.25)
                self.then()
            self.outcome = "committed"
        except Exception as exc:  # the database chose the worker: the test then proves nothing, and fails
            self.outcome = f"{type(exc).__name__}: {exc}"
        finally:
            self.holding.set()
            connections.close_all()


@pytest.fixture
def worker() -> Iterator[Callable[[Callable[[], Any], Callable[[], Any]], Worker]]:
    started: list[Worker] = []

    def start(first: Callable[[], Any], then: Callable[[], Any]) -> Worker:
        thread = Worker(first, then, session_id())
        thread.start()
        started.append(thread)
        assert thread.holding.wait(60)
        return thread

    yield start
    for thread in started:
        thread.join(60)


# A wait a worker holds (its attempt's row) while it wakes the run (its row), and the send that delivers to it.
SENDS = {
    "signal": ({"signal": "go"}, lambda run: send_signal(run.id, "go", {"n": 1})),
    "event": ({"event": "paid", "match": {"order": 7}}, lambda run: send_event("paid", {"order": 7})),
}


@pytest.mark.parametrize(
    "kind",
    [
        "signal",
        pytest.param(
            "event",
            marks=pytest.mark.skipif(
                VENDOR == "mysql",
                reason="MariaDB's event send locks the open waits first (event_waits reads FOR UPDATE), in the "
                "worker's order: it waits, and no deadlock forms",
            ),
        ),
    ],
)
def test_a_send_aborted_against_a_worker_waking_its_run_is_delivered(worker, kind):
    """A send locks the run, then the waiting attempt; a worker's end locks the attempt, then the run."""
    context, send = SENDS[kind]
    now = get_backend().now()
    run = WorkflowRun.objects.create(workflow_name="waiter", status="running", input={}, available_at=now)
    wait = StepAttempt.objects.create(
        workflow_run=run, step_name="wait:1", kind=kind, status="running", context=context
    )
    weight = ballast()

    def lock_the_attempt() -> None:
        heavy_work(weight)
        list(StepAttempt.objects.select_for_update().filter(id=wait.id).order_by().values_list("id"))

    def lock_the_run() -> None:
        list(WorkflowRun.objects.select_for_update().filter(id=run.id).values_list("id"))

    thread = worker(lock_the_attempt, lock_the_run)
    delivered = send(run)
    thread.join(60)
    assert thread.outcome == "committed"  # it got the run's row: the send's first transaction was aborted
    assert delivered in (True, 1)  # a signal says True, an event how many runs it woke
    assert StepAttempt.objects.get(id=wait.id).status == "completed"
    assert (Signal if kind == "signal" else Event).objects.count() == 1
