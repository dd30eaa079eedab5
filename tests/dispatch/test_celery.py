"""Celery dispatch with a real Redis broker and real `celery worker` subprocesses (no eager mode)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Count

celery = pytest.importorskip("celery", reason="Celery dispatch needs the `celery` extra")
redis = pytest.importorskip("redis", reason="the Celery tests need Redis (celery[redis])")

from django_openworkflow.dispatch import checks as dispatch_checks  # noqa: E402
from django_openworkflow.dispatch.celery import SWEEP, execute_run, send_execute_run, sweep  # noqa: E402
from django_openworkflow.models import StepAttempt, WorkflowRun  # noqa: E402
from tests import settings_celery  # noqa: E402
from tests.conftest import CEILING, ROOT, wait_until  # noqa: E402
from tests.fixtures.celery_app import app  # noqa: E402
from tests.fixtures.celery_workflows import parent, sleepy  # noqa: E402
from tests.fixtures.testapp.models import SideEffect  # noqa: E402
from tests.fixtures.testapp.workflows import slow_steps, three_steps  # noqa: E402

QUEUE = "workflows"


@pytest.fixture(autouse=True)
def _tests_celery_app_is_current() -> None:
    # A test elsewhere may have imported example_project, whose __init__ loads
    # (and so makes current) the example's own Celery app.
    app.set_current()


@pytest.fixture
def celery_dispatch(settings: Any, broker: Any) -> None:
    """This process starts runs the way the worker subprocesses are configured: DISPATCH = "celery"."""
    settings.OPENWORKFLOW = settings_celery.OPENWORKFLOW


class CeleryWorkers:
    """`celery worker` subprocesses on the test database, each in its own process group."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, pool: str = "threads", concurrency: int = 4) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="tests.settings_celery",
            OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
        )
        command = [
            sys.executable, "-m", "celery", "-A", "tests.fixtures.celery_app", "worker",
            "--pool", pool, "--concurrency", str(concurrency), "--queues", QUEUE,
            "--hostname", f"owf{len(self.procs)}@%h", "--loglevel", "WARNING",
            "--without-heartbeat", "--without-gossip", "--without-mingle",
        ]  # fmt: skip
        proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL the worker and its pool processes, as a crashed machine would go."""
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.kill(proc)


@pytest.fixture
def celery_workers(celery_dispatch: None) -> Iterator[CeleryWorkers]:
    pool = CeleryWorkers()
    yield pool
    pool.stop_all()


def effects_per_run(run_ids: list[Any]) -> dict[Any, dict[str, int]]:
    """{run id: {step: executions}} from the SideEffect rows the step functions write."""
    rows = SideEffect.objects.filter(run_id__in=run_ids).values("run_id", "step").annotate(n=Count("id"))
    result: dict[Any, dict[str, int]] = {run_id: {} for run_id in run_ids}
    for row in rows:
        result[row["run_id"]][row["step"]] = row["n"]
    return result


def assert_effects(run_ids: list[Any], expected: dict[str, int]) -> None:
    """Every run executed each step function exactly as often as ``expected`` says."""
    wrong = {run_id: effects for run_id, effects in effects_per_run(run_ids).items() if effects != expected}
    assert not wrong, f"{len(wrong)} of {len(run_ids)} runs differ from {expected}: {wrong}"


def all_completed(run_ids: list[Any]) -> bool:
    return WorkflowRun.objects.filter(id__in=run_ids, status="completed").count() == len(run_ids)


def sweeping_until_completed(run_ids: list[Any], every: float = 0.5) -> Any:
    """A predicate for wait_until that also plays Celery beat: it calls sweep() every ``every`` seconds."""
    last = 0.0

    def check() -> bool:
        nonlocal last
        if all_completed(run_ids):
            return True
        if time.monotonic() - last >= every:
            sweep()
            last = time.monotonic()
        return False

    return check


# -- sending ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_message_is_sent_when_the_start_commits_and_not_on_rollback(celery_dispatch, broker):
    with transaction.atomic():
        handle = sleepy.run({"n": 1})
        assert broker.llen(QUEUE) == 0
    assert broker.llen(QUEUE) == 1
    with pytest.raises(RuntimeError), transaction.atomic():
        sleepy.run({"n": 2})
        raise RuntimeError("roll back")
    assert broker.llen(QUEUE) == 1
    assert WorkflowRun.objects.get().id == handle.id


@pytest.mark.django_db(transaction=True)
def test_a_run_of_a_named_queue_goes_to_its_own_celery_queue(celery_dispatch, broker):
    handle = sleepy.run({"n": 1}, queue="pdf")
    assert (broker.llen(QUEUE), broker.llen(f"{QUEUE}.pdf")) == (0, 1)
    # The sweep sends it there too (its first message was lost).
    broker.delete(f"{QUEUE}.pdf")
    assert sweep() == 1
    assert broker.llen(f"{QUEUE}.pdf") == 1
    assert WorkflowRun.objects.get(id=handle.id).queue == "pdf"


@pytest.mark.django_db(transaction=True)
def test_broker_down_the_start_still_commits_and_warns(celery_dispatch, caplog):
    unreachable = celery.Celery("unreachable", broker="redis://127.0.0.1:1/0", fixups=[], set_as_current=False)
    previous = celery.current_app._get_current_object()
    unreachable.set_current()
    try:
        handle = sleepy.run({"n": 1})
    finally:
        previous.set_current()
    assert handle.status() == "pending"
    assert "could not send its Celery task" in caplog.text and "the sweep will dispatch it" in caplog.text
    assert sweep() == 1
    assert sweep() == 0  # just sent for it: no duplicate from the same process


# -- executing --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_hundred_runs_with_a_sleep_each_step_exactly_once(celery_workers):
    handles = [sleepy.run({"n": i}) for i in range(100)]
    # Duplicate messages: their claims fail and they do nothing.
    for handle in handles[::3]:
        send_execute_run(handle.id)
    celery_workers.start("threads", concurrency=8)
    run_ids = [handle.id for handle in handles]
    # No sweep: parked runs come back through their delayed (ETA) messages.
    wait_until(lambda: all_completed(run_ids), timeout=CEILING, interval=0.1)
    assert [handle.result() for handle in handles[:3]] == [1, 11, 21]
    assert_effects(run_ids, {"one": 1, "two": 1, "three": 1})


@pytest.mark.django_db(transaction=True)
def test_prefork_pool_children_are_dispatched_and_wake_their_parents(celery_workers, broker):
    handles = [parent.run({"n": i}) for i in range(10)]
    celery_workers.start("prefork", concurrency=2)
    run_ids = [handle.id for handle in handles]
    # No sweep: children are sent by the parent's slice, parents by the child's completion.
    wait_until(lambda: all_completed(run_ids), timeout=CEILING, interval=0.1)
    assert [handle.result() for handle in handles[:3]] == [1, 3, 5]
    children = list(WorkflowRun.objects.filter(workflow_name="celery-child").values_list("id", flat=True))
    assert len(children) == 10 and all_completed(children)
    # Late duplicates of every run, and a sweep, change nothing.
    for run_id in run_ids + children:
        send_execute_run(run_id)
    assert sweep() == 0
    wait_until(lambda: broker.llen(QUEUE) == 0, timeout=CEILING)
    time.sleep(0.3)  # let the last messages' claims fail
    assert_effects(run_ids, {"after": 1})
    assert_effects(children, {"double": 1})


@pytest.mark.django_db(transaction=True)
def test_async_fan_out_and_continue_as_new_are_dispatched_without_a_sweep(celery_workers, broker):
    from tests.fixtures.languageapp import workflows as lang

    async_run = lang.async_gather.run({"pause": "100ms"})
    sync_run = lang.quick.run({"n": 1})
    fan_out = lang.fan_out.run({"count": 20})
    poller = lang.poller.run({"count": 0, "until": 6})
    celery_workers.start("prefork", concurrency=2)
    # No sweep: children and the successor are sent by the slice that started them.
    wait_until(lambda: all(h.status() in ("completed", "continued") for h in (async_run, fan_out)), timeout=CEILING)
    assert async_run.result() == ["A", "B", "C"] and sync_run.result(timeout=CEILING) == {"n": 1}
    assert len(fan_out.result()) == 20
    assert poller.result(timeout=CEILING) == 6 and poller.status() == "continued"


@pytest.mark.django_db(transaction=True)
def test_sigkill_mid_run_then_a_new_worker_and_the_sweep_complete_every_run(celery_workers):
    # Step "two" hangs the first time it runs: four runs stuck in it, on four of six threads...
    hung = [three_steps.run({"start": i, "hang_first_time": True}).id for i in range(4)]
    first = celery_workers.start("threads", concurrency=6)
    wait_until(lambda: SideEffect.objects.filter(run_id__in=hung, step="two").count() == 4, timeout=CEILING)
    # ...and parked runs whose delayed messages the worker holds when it dies.
    parked = [sleepy.run({"n": i, "nap": "2s"}).id for i in range(5)]
    # Parked after their first slice: step "one" ran and no worker holds them (before their
    # first claim no worker holds them either, and a kill mid-step would run "one" again).
    wait_until(
        lambda: (
            SideEffect.objects.filter(run_id__in=parked, step="one").count() == 5
            and WorkflowRun.objects.filter(id__in=parked, worker_id=None, attempts=0).count() == 5
        ),
        timeout=CEILING,
    )
    celery_workers.kill(first)
    # Those messages are unacknowledged in Redis until its visibility timeout (an hour): lost,
    # as far as this test is concerned. The sweep finds the runs once their leases or naps run out.
    celery_workers.start("threads", concurrency=4)
    wait_until(sweeping_until_completed(hung + parked), timeout=CEILING, interval=0.1)
    assert_effects(hung, {"one": 1, "two": 2, "three": 1})
    assert_effects(parked, {"one": 1, "two": 1, "three": 1})
    # The attempt the dead worker left open was closed as failed, then retried.
    statuses = StepAttempt.objects.filter(workflow_run_id__in=hung, step_name="two").values_list("status", flat=True)
    assert sorted(statuses) == ["completed"] * 4 + ["failed"] * 4


@pytest.mark.django_db(transaction=True)
def test_heartbeat_keeps_a_slice_longer_than_the_lease(celery_workers):
    # One 3 s step under a 2 s lease, with a sweep every 0.2 s: without heartbeats
    # the sweep would hand the run to a second thread, which would run the step again.
    handle = slow_steps.run({"steps": 1, "pause": 3})
    celery_workers.start("threads", concurrency=2)
    wait_until(sweeping_until_completed([handle.id], every=0.2), timeout=CEILING, interval=0.05)
    assert_effects([handle.id], {"tick": 1})


@pytest.mark.django_db(transaction=True)
def test_a_delayed_message_that_arrives_early_is_sent_again_for_the_rest(celery_workers, broker):
    handle = sleepy.run({"n": 4, "nap": "2s"})
    assert execute_run(str(handle.id)) == "parked"  # its first slice, in this process
    broker.delete(QUEUE)  # the run's own messages: lost
    # A message for the wake time that arrives 2 s early (think of a worker clock ahead of the database's).
    send_execute_run(handle.id, due_at=handle.fetch().available_at)
    celery_workers.start("threads", concurrency=2)
    assert handle.result(timeout=CEILING) == 41  # no sweep: only that message can have done it


@pytest.mark.django_db(transaction=True)
def test_lost_messages_are_recovered_by_the_beat_sweep(celery_workers, broker):
    handles = [sleepy.run({"n": i}) for i in range(20)]
    broker.delete(QUEUE)  # every message lost
    celery_workers.start("threads", concurrency=4)
    run_ids = [handle.id for handle in handles]
    time.sleep(1.0)
    assert WorkflowRun.objects.filter(id__in=run_ids, status="pending").count() == 20
    # What Celery beat does: send the sweep task by name (it is routed to the workflow queue).
    app.send_task(SWEEP)
    wait_until(lambda: all_completed(run_ids), timeout=CEILING, interval=0.1)
    assert_effects(run_ids, {"one": 1, "two": 1, "three": 1})


@pytest.mark.django_db(transaction=True)
def test_lost_messages_are_recovered_by_runworkflows_dispatch_only(celery_workers, broker):
    handles = [sleepy.run({"n": i}) for i in range(10)]
    broker.delete(QUEUE)  # every message lost
    celery_workers.start("threads", concurrency=4)
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE="tests.settings_celery",
        OWF_TEST_DB_NAME=str(connection.settings_dict["NAME"]),
    )
    # As a project's __init__.py would, load the Celery app before the command runs.
    command = (
        "import tests.fixtures.celery_app; from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', 'runworkflows', '--dispatch-only', '--poll', '200ms'])"
    )
    sweeper = subprocess.Popen([sys.executable, "-c", command], cwd=ROOT, env=env)
    run_ids = [handle.id for handle in handles]
    try:
        wait_until(lambda: all_completed(run_ids), timeout=CEILING, interval=0.1)
    finally:
        sweeper.send_signal(signal.SIGTERM)
        assert sweeper.wait(10) == 0
    assert_effects(run_ids, {"one": 1, "two": 1, "three": 1})


# -- checks and optional import ---------------------------------------------


def check_ids() -> list[str]:
    return [message.id for message in dispatch_checks.check_dispatch() if message.is_serious()]


def test_checks_accept_a_configured_celery_app(settings):
    settings.OPENWORKFLOW = {"DISPATCH": "celery"}
    assert celery.current_app.main == "tests"
    assert check_ids() == []


def test_checks_reject_an_unknown_dispatcher(settings):
    settings.OPENWORKFLOW = {"DISPATCH": "rq"}
    assert check_ids() == ["openworkflow.E010"]


def test_checks_reject_a_celery_app_without_broker(settings):
    settings.OPENWORKFLOW = {"DISPATCH": "celery"}
    bare = celery.Celery("bare", fixups=[], set_as_current=False)
    previous = celery.current_app._get_current_object()
    bare.set_current()
    try:
        messages = dispatch_checks.check_dispatch()
    finally:
        previous.set_current()
    assert [message.id for message in messages] == ["openworkflow.E012"]
    assert "the current Celery app ('bare') has no broker configured" in messages[0].msg


def test_checks_registered(settings):
    settings.OPENWORKFLOW = {"DISPATCH": "rq"}
    assert "openworkflow.E010" in [message.id for message in checks.run_checks()]


WITHOUT_CELERY = """
import sys
sys.modules["celery"] = None  # as if it were not installed
import django
django.setup()
from django.core import checks
from django.test.utils import override_settings
import django_openworkflow.admin, django_openworkflow.client.runs, django_openworkflow.worker.loop
from django_openworkflow.dispatch import checks as dispatch_checks
with override_settings(OPENWORKFLOW={"DISPATCH": "celery"}):
    dispatch_checks.load_dispatcher()
    print([(m.id, m.msg) for m in checks.run_checks() if m.id.startswith("openworkflow.")])
"""


def test_the_package_works_without_celery_and_the_check_says_so():
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings")
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CELERY], cwd=ROOT, env=env, capture_output=True, text=True, timeout=CEILING
    )
    assert done.returncode == 0, done.stderr
    assert "('openworkflow.E011', \"OPENWORKFLOW['DISPATCH'] is 'celery' but Celery is not installed\")" in done.stdout


class _SignalOnceLogged(logging.Handler):
    """Sends ``signum`` to this process when a record says ``words``: a signal at that very point of start-up."""

    def __init__(self, words: str, signum: int) -> None:
        super().__init__()
        self.words, self.signum = words, signum

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            os.kill(os.getpid(), self.signum)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_dispatch_only_starts_up_stops_it_cleanly(celery_dispatch, caplog, signum):
    """The signal lands after the start-up line, before the loop's first sweep: it stops the loop, no traceback.

    The handlers used to go in only when the loop started, after that line:
    Ctrl-C then raised KeyboardInterrupt, and SIGTERM killed the process
    with no clean-up.
    """
    before = signal.getsignal(signum)
    trigger = _SignalOnceLogged("sweeping due runs to Celery", signum)
    logger = logging.getLogger("django_openworkflow.dispatch")
    logger.addHandler(trigger)
    # Should the signal be lost, a second one ends the loop after 30 s, and the test fails instead of hanging.
    rescued: list[bool] = []  # appended by the timer's thread only, read after it is canceled

    def rescue_signal() -> None:
        rescued.append(True)
        os.kill(os.getpid(), signal.SIGTERM)

    rescue = threading.Timer(30, rescue_signal)
    rescue.start()
    try:
        with caplog.at_level("INFO", logger="django_openworkflow.dispatch"):
            call_command("runworkflows", "--dispatch-only", "--poll", "60s", verbosity=1)  # returns: it stopped
    finally:
        logger.removeHandler(trigger)
        rescue.cancel()
    assert not rescued, "the signal sent while it started up was lost: only the rescue signal stopped it"
    assert "sweeping due runs to Celery" in caplog.text  # the signal was sent
    assert signal.getsignal(signum) is before  # the handlers from before, again
