"""Flow control across real processes: concurrency limits, rate limits, priorities, debounce, queues.

Workers are real ``manage.py runworkflows`` subprocesses (and, for one
test, real ``celery worker`` subprocesses) on the test database. The
workflows are in tests/fixtures/flowapp/workflows.py; their steps write
:class:`~tests.fixtures.flowapp.models.Ledger` rows, each committed before or after
the step's work.

How overlap is checked, without clocks: a ledger row's auto-increment id
is taken when it is inserted, so ordering the rows by id orders the events
of every process. A run is admitted (claimed) before its step writes
"start" and lets its place go after the step wrote "end": if two runs'
places never overlap, neither do their [start, end] id intervals. Counting
the runs between "start" and "end" at each row therefore never
under-counts what held a place at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from tests.conftest import CEILING, ROOT, wait_until
from tests.fixtures.flowapp.models import Ledger
from tests.fixtures.flowapp.workflows import debounced, default, limited, ordered, pdf, rated

pytestmark = pytest.mark.django_db(transaction=True)

FAST = ("--poll", "20ms")


def completed(workflow_name: str) -> int:
    return WorkflowRun.objects.filter(workflow_name=workflow_name, status="completed").count()


def in_flight_peaks(workflow_name: str = "flow-limited") -> dict[str, int]:
    """Per key, the most runs ever between a "start" and its "end" at once, replaying the ledger in id order.

    An execution whose process was killed leaves a "start" without an
    "end": it counts until the same run's next "start" (the run kept its
    place until its lease expired and another worker re-claimed it, and
    that worker's execution continues it). An "end" of an execution that a
    later one already replaced closes nothing. So a run counts once, from
    its first "start" to the "end" of its last execution.
    """
    run_ids = WorkflowRun.objects.filter(workflow_name=workflow_name).values_list("id", flat=True)
    rows = Ledger.objects.filter(run_id__in=list(run_ids)).order_by("id").values_list("run_id", "key", "event", "token")
    open_token: dict[Any, str] = {}  # run -> the execution that is between start and end
    in_flight: Counter[str] = Counter()
    peaks: Counter[str] = Counter()
    for run_id, key, event, token in rows:
        if event == "start":
            if run_id not in open_token:
                in_flight[key] += 1
            open_token[run_id] = token  # replaces a dead execution's start
            peaks[key] = max(peaks[key], in_flight[key])
        elif open_token.get(run_id) == token:
            del open_token[run_id]
            in_flight[key] -= 1
    assert not open_token, f"runs still between start and end after every run completed: {sorted(open_token)}"
    return dict(peaks)


def start_limited(runs: int, keys: int, **extra: Any) -> list[Any]:
    return [limited.run({"customer": f"c{i % keys}", "n": i, **extra}).id for i in range(runs)]


def assert_each_run_worked_once(run_ids: list[Any]) -> None:
    ends = Counter(Ledger.objects.filter(run_id__in=run_ids, event="end").values_list("run_id", flat=True))
    assert len(ends) == len(run_ids) and set(ends.values()) == {1}, f"runs whose step did not end exactly once: {ends}"


# -- concurrency limits ---------------------------------------------------


def test_concurrency_limit_holds_across_three_worker_processes(workers):
    """200 runs over 5 keys, Concurrency(2) per key, 3 processes of 4 slots (12 slots, 10 places)."""
    # The first run of each key waits for a second to start (meet), so that the limit is reached
    # even on a busy machine, and each step works 0.2 s so that later ones overlap too.
    run_ids = start_limited(200, 5, pause=0.2, meet=True)
    for _ in range(3):
        workers.start("--concurrency", "4", *FAST)
    wait_until(lambda: completed("flow-limited") == 200, timeout=CEILING, interval=0.1)
    peaks = in_flight_peaks()
    # Never more than the limit; and the limit was reached (else the check proves nothing).
    assert set(peaks) == {f"c{k}" for k in range(5)} and max(peaks.values()) == 2, peaks
    assert_each_run_worked_once(run_ids)
    assert WorkflowRun.objects.filter(id__in=run_ids, blocked_at__isnull=False).count() == 0
    # The three processes shared the work.
    assert Ledger.objects.values("pid").distinct().count() == 3


def test_concurrency_limit_holds_when_a_worker_is_killed_mid_run(workers):
    """As above, and one of the three processes, with --lease 1s, SIGKILLed while it executes runs.

    Two runs (keys c0 and c1) hang in their step the first time; they are
    started first at a higher priority so that the process that will be
    killed takes them. Each keeps its place for the second or so until its
    lease expires and another process re-claims it (then runs normally).
    The two that survive keep the default lease: on a machine loaded enough
    to starve a heartbeat for a second, a 1 s lease of theirs would lapse too,
    and a run taken over from a live worker may rightly end twice.
    """
    hung = [limited.run({"customer": f"c{k}", "n": -1, "hang_first_time": True}, priority=10).id for k in range(2)]
    run_ids = hung + start_limited(198, 5)
    victim = workers.start("--concurrency", "4", "--lease", "1s", *FAST)
    wait_until(lambda: Ledger.objects.filter(run_id__in=hung, event="start", pid=victim.pid).count() == 2)
    for _ in range(2):
        workers.start("--concurrency", "4", *FAST)
    wait_until(lambda: Ledger.objects.filter(event="end").count() >= 40, timeout=CEILING)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    wait_until(lambda: completed("flow-limited") == 200, timeout=CEILING, interval=0.1)
    peaks = in_flight_peaks()
    # Never more than the limit; and the limit was reached (else the check proves nothing).
    assert set(peaks) == {f"c{k}" for k in range(5)} and max(peaks.values()) == 2, peaks
    # Nothing is lost. A run the killed process had finished its step of, but not yet
    # recorded as completed, is executed again: only such runs end twice.
    ends = Counter(Ledger.objects.filter(event="end").values_list("run_id", "pid"))
    for run_id in run_ids:
        by_victim = ends[(run_id, victim.pid)]
        by_others = sum(n for (run, pid), n in ends.items() if run == run_id and pid != victim.pid)
        assert by_victim + by_others >= 1 and by_victim <= 1 and by_others <= 1, (run_id, by_victim, by_others)
    # The hung runs' first executions died with the process.
    for run_id in hung:
        starts = list(Ledger.objects.filter(run_id=run_id, event="start").order_by("id").values_list("pid", flat=True))
        assert len(starts) == 2 and starts[0] == victim.pid and starts[1] != victim.pid, starts
    assert not Ledger.objects.filter(run_id__in=hung, event="end", pid=victim.pid).exists()


# -- the same with Celery workers ----------------------------------------------


@pytest.fixture
def celery_processes(settings: Any, broker: Any) -> Iterator[Any]:
    """This process dispatches to Celery (Redis, emptied); yields a function that starts subprocesses likewise."""
    pytest.importorskip("celery", reason="Celery dispatch needs the `celery` extra")
    from tests import settings_celery
    from tests.fixtures.celery_app import app

    app.set_current()  # another test may have made the example project's app current
    settings.OPENWORKFLOW = settings_celery.OPENWORKFLOW
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings_celery",
        OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
    )
    procs: list[subprocess.Popen[bytes]] = []

    def start(command: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
        procs.append(proc)
        return proc

    start.broker = broker  # type: ignore[attr-defined]
    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def consumers(broker: Any) -> int:
    """Connections blocked reading a queue of the test's Redis database: one per listening Celery worker."""
    db = str(broker.connection_pool.connection_kwargs.get("db", 0))
    return sum(1 for client in broker.client_list() if client["cmd"] == "brpop" and client["db"] == db)


def test_concurrency_limit_holds_across_celery_workers(celery_processes):
    """60 runs over 3 keys, Concurrency(2) per key, two `celery worker` processes of 4 threads.

    Blocked runs come back through the message a finishing run sends for
    the one it wakes, and through the sweep (``runworkflows --dispatch-only``)
    for the runs that ask again for a place every second.
    """
    for number in range(2):
        celery_processes(
            [
                sys.executable, "-m", "celery", "-A", "tests.fixtures.celery_app", "worker", "--pool", "threads",
                "--concurrency", "4", "--queues", "workflows", "--hostname", f"owf-flow{number}@%h",
                "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
            ]
        )  # fmt: skip
    sweep = (
        "import tests.fixtures.celery_app; from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'runworkflows', '--dispatch-only', '--poll', '200ms'])"
    )
    celery_processes([sys.executable, "-c", sweep])
    # Both workers listen before the runs start, so that both take part.
    wait_until(lambda: consumers(celery_processes.broker) >= 2, timeout=CEILING, interval=0.1)
    run_ids = start_limited(60, 3, meet=True)
    wait_until(lambda: completed("flow-limited") == 60, timeout=CEILING, interval=0.1)
    peaks = in_flight_peaks()
    # Never more than the limit; and the limit was reached (else the check proves nothing).
    assert set(peaks) == {f"c{k}" for k in range(3)} and max(peaks.values()) == 2, peaks
    assert_each_run_worked_once(run_ids)
    assert Ledger.objects.values("pid").distinct().count() == 2


# -- rate limits ----------------------------------------------------------------


def test_rate_limit_holds_across_two_workers(workers):
    """RateLimit(5, per="1s"): 60 runs started at once, two processes of 4 slots.

    Checked on the runs' ``started_at`` (the database clock, set when a
    run is first claimed, under the key's lock): any 6 consecutive starts
    span at least 1 s, with no tolerance (a start exactly 1 s before the
    claim's clock is outside its window, hence ``>=``). That a window admits
    as many starts as the limit allows, not fewer, is the store's test
    (tests/store/test_flow_control.py), where no process can be slow: here a
    busy machine may claim late, so how long 40 starts took is no verdict.
    """
    run_ids = [rated.run({"n": i}).id for i in range(60)]
    for _ in range(2):
        workers.start("--concurrency", "4", *FAST)
    started = WorkflowRun.objects.filter(id__in=run_ids, started_at__isnull=False)
    wait_until(lambda: started.count() >= 40, timeout=CEILING, interval=0.1)
    starts = sorted(started.values_list("started_at", flat=True))
    for first, sixth in zip(starts, starts[5:], strict=False):
        assert sixth - first >= timedelta(seconds=1), f"6 starts within {sixth - first}: {starts}"


# -- priorities ---------------------------------------------------------------


def test_higher_priority_runs_are_claimed_first(workers):
    """One process, one slot: 10 runs at priority 0 then 3 at priority 5, all due before it starts."""
    low = [ordered.run({"n": i}).id for i in range(10)]
    high = [ordered.run({"n": 100 + i}, priority=5).id for i in range(3)]
    proc = workers.start("--burst", "--concurrency", "1", *FAST)
    assert proc.wait(60) == 0
    order = list(Ledger.objects.filter(event="end").order_by("id").values_list("run_id", flat=True))
    # Higher priority first; within a priority, in the order they were started.
    assert order == high + low
    finished = dict(WorkflowRun.objects.values_list("id", "finished_at"))
    assert max(finished[run_id] for run_id in high) < min(finished[run_id] for run_id in low)


# -- debounce -----------------------------------------------------------------


def test_debounced_starts_become_one_run_with_the_last_input(workers):
    """Debounce("1s"): 50 starts of one document, 20 ms apart, while a worker runs: one run, the last input."""
    workers.start("--concurrency", "2", *FAST)
    store = get_backend()
    handles = []
    for i in range(50):
        before_last = store.now()
        handles.append(debounced.run({"doc": "d1", "n": i}))
        time.sleep(0.02)
    assert handles[0].created and not any(handle.created for handle in handles[1:])
    assert {handle.id for handle in handles} == {handles[0].id}
    assert handles[0].result(timeout=CEILING) == {"doc": "d1", "n": 49}
    run = handles[0].fetch()
    assert run.input == {"doc": "d1", "n": 49}
    # Put off to a period after the last start.
    assert run.started_at >= before_last + timedelta(seconds=1)
    assert WorkflowRun.objects.filter(workflow_name="flow-debounced").count() == 1
    # Once that run was claimed, a start with the same key makes a new run.
    again = debounced.run({"doc": "d1", "n": 50})
    assert again.created and again.id != handles[0].id
    assert again.result(timeout=CEILING) == {"doc": "d1", "n": 50}
    assert WorkflowRun.objects.filter(workflow_name="flow-debounced").count() == 2


# -- queues -------------------------------------------------------------------


def test_a_worker_claims_only_its_queues(workers):
    in_pdf = pdf.run({"n": 1})
    in_default = default.run({"n": 2})
    assert workers.start("--burst", *FAST).wait(60) == 0
    assert in_default.result() == 2
    run = in_pdf.fetch()
    assert (run.queue, run.status, run.started_at, run.worker_id) == ("pdf", "pending", None, None)
    assert workers.start("--burst", "--queue", "pdf", *FAST).wait(60) == 0
    assert in_pdf.result() == 1
