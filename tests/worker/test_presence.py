"""Workers' heartbeat rows, paused queues and ``--queue '*'``, with real worker processes."""

from __future__ import annotations

import signal
import subprocess
from datetime import timedelta

import pytest

from django_openworkflow.models import QueueState, WorkerProcess
from django_openworkflow.store import workers
from django_openworkflow.worker.presence import Presence
from tests.conftest import CEILING, wait_until
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def _row(proc: subprocess.Popen[bytes]) -> WorkerProcess | None:
    return WorkerProcess.objects.filter(pid=proc.pid).first()


def _beats(proc: subprocess.Popen[bytes], count: int) -> None:
    """Wait until the worker of ``proc`` has written its row and then ``count`` heartbeats after this call."""
    wait_until(lambda: _row(proc) is not None)
    for _ in range(count):
        seen = _row(proc).last_seen_at  # type: ignore[union-attr]
        wait_until(lambda seen=seen: _row(proc).last_seen_at > seen)  # type: ignore[union-attr]


def test_a_worker_writes_its_row_beats_and_marks_it_stopped(workers_pool):
    proc = workers_pool.start("--lease", "1s", "--poll", "20ms", "--queue", "default", "--queue", "emails")
    _beats(proc, 2)
    row = _row(proc)
    assert row is not None
    assert row.queues == ["default", "emails"]
    assert row.slots_total == 10 and row.version and row.host
    assert row.heartbeat_seconds == pytest.approx(1 / 3)
    assert [w.state for w in workers.workers() if w.pid == proc.pid] == ["live"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    row.refresh_from_db()
    assert row.stopped_at is not None
    assert [w.state for w in workers.workers() if w.pid == proc.pid] == ["stopped"]


def test_a_killed_worker_reads_dead_and_its_queue_unserved(workers_pool):
    proc = workers_pool.start("--lease", "1s", "--poll", "20ms", "--queue", "emails")
    _beats(proc, 1)
    handle = three_steps.run({"start": 1}, queue="emails", available_at="1h")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: [w.state for w in workers.workers() if w.pid == proc.pid] == ["dead"])
    # Due now: the dead worker no longer serves it.
    three_steps.run({"start": 2}, queue="emails")
    assert [q.name for q in workers.unserved_queues()] == ["emails"]
    assert handle.status() == "pending"


def test_a_paused_queue_is_not_claimed_until_resumed(workers_pool):
    workers.set_paused("default", True, "test")
    handle = three_steps.run({"start": 3})
    proc = workers_pool.start("--lease", "1s", "--poll", "20ms")
    _beats(proc, 3)  # it read the paused queues at its start and at each of these heartbeats
    assert handle.status() == "pending"
    overview = {q.name: q for q in workers.queue_overview()}
    assert overview["default"].paused and not overview["default"].unserved
    assert workers.set_paused("default", False, "test")
    assert handle.result(timeout=CEILING) == {"result": 31}


def test_a_pause_takes_effect_at_the_next_heartbeat(workers_pool):
    proc = workers_pool.start("--lease", "1s", "--poll", "20ms")
    first = three_steps.run({"start": 1})
    assert first.result(timeout=CEILING) == {"result": 11}
    workers.set_paused("default", True, "test")
    _beats(proc, 2)  # the paused queues are read at each heartbeat
    second = three_steps.run({"start": 2})
    _beats(proc, 2)
    assert second.status() == "pending"


def test_star_serves_every_queue_and_skips_the_paused_one(workers_pool):
    workers.set_paused("paused-q", True, "test")
    emails = three_steps.run({"start": 1}, queue="emails")
    billing = three_steps.run({"start": 2}, queue="billing")
    held = three_steps.run({"start": 3}, queue="paused-q")
    proc = workers_pool.start("--lease", "1s", "--poll", "20ms", "--queue", "*")
    assert emails.result(timeout=CEILING) == {"result": 11}
    assert billing.result(timeout=CEILING) == {"result": 21}
    # A queue no run used when the worker last looked: claimed from the next heartbeat on.
    late = three_steps.run({"start": 4}, queue="late-q")
    assert late.result(timeout=CEILING) == {"result": 41}
    _beats(proc, 1)
    assert held.status() == "pending"
    overview = {q.name: q for q in workers.queue_overview()}
    assert overview["paused-q"].paused and overview["paused-q"].due == 1 and not overview["paused-q"].unserved
    assert _row(proc).worker_id in overview["default"].served_by  # type: ignore[union-attr]


def test_a_pruned_row_is_written_again_at_the_next_heartbeat():
    presence = Presence("test-host:1:abc", ["default"], 4, timedelta(seconds=1))
    presence.start()
    WorkerProcess.objects.filter(worker_id="test-host:1:abc").delete()
    presence.beat(2)
    row = WorkerProcess.objects.get(worker_id="test-host:1:abc")
    assert (row.slots_total, row.queues) == (4, ["default"])


def test_old_rows_are_pruned_live_ones_kept():
    for worker_id in ("old", "new"):
        workers.register(
            worker_id, host="h", pid=1, version="0", queues=["default"], slots=1, heartbeat=timedelta(seconds=1)
        )
    WorkerProcess.objects.filter(worker_id="old").update(
        last_seen_at=workers.get_backend().now() - workers.KEEP_GONE * 2
    )
    assert workers.prune_gone() == 1
    assert list(WorkerProcess.objects.values_list("worker_id", flat=True)) == ["new"]


def test_pause_and_resume_say_whether_they_changed_anything():
    assert workers.set_paused("q", True, "me")
    assert not workers.set_paused("q", True, "me")
    assert QueueState.objects.get(name="q").changed_by == "me"
    assert workers.set_paused("q", False, "me")
    assert not workers.set_paused("q", False, "me")
    assert not workers.set_paused("never-paused", False, "me")
    assert workers.paused_queues() == set()


@pytest.fixture
def workers_pool(workers):
    return workers


def test_a_worker_warns_at_start_up_of_queues_nobody_serves(workers_pool):
    three_steps.run({"start": 1}, queue="emails")
    workers.set_paused("billing", True, "test")
    three_steps.run({"start": 2}, queue="billing")
    proc = workers_pool.start("--burst", "--poll", "10ms", stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=CEILING)
    log = err.decode()
    assert proc.returncode == 0
    assert "openworkflow.W090: No live worker serves queue(s) 'emails' (1 due)" in log
    assert "Paused on purpose, not counted: billing." in log
    star = workers_pool.start("--burst", "--poll", "10ms", "--queue", "*", stderr=subprocess.PIPE)
    _, err = star.communicate(timeout=CEILING)
    assert "openworkflow.W090" not in err.decode()


def test_a_heartbeat_after_the_stop_leaves_the_row_stopped():
    """An unhealthy worker exits without waiting for a heartbeat stuck in the database: it must not revive the row."""
    presence = Presence("test-host:2:abc", ["*"], 1, timedelta(seconds=1))
    assert presence.claim_queues[0] == "default"  # before start(): nothing read from the database
    presence.start()
    presence.stop()
    presence.beat(1)
    assert WorkerProcess.objects.get(worker_id="test-host:2:abc").stopped_at is not None
