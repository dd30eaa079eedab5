"""``manage.py workflows queues``, ``queue pause|resume`` and ``workers``: text, JSON and errors."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_openworkflow.models import WorkerProcess
from django_openworkflow.store import get_backend, workers
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def as_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def _worker(worker_id: str, queues: list[str], *, seen_ago: timedelta = timedelta(0)) -> None:
    workers.register(
        worker_id, host="h1", pid=7, version="0.3.0", queues=queues, slots=4, heartbeat=timedelta(seconds=10)
    )
    if seen_ago:
        WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=get_backend().now() - seen_ago)


def test_queues_flags_a_queue_with_due_runs_that_no_live_worker_serves():
    _worker("w-default", ["default"])
    _worker("w-dead", ["emails"], seen_ago=timedelta(minutes=5))  # 30 heartbeats missed: dead
    three_steps.run({}, queue="emails")
    three_steps.run({})
    text = run("queues")
    assert "NOBODY: runs wait" in text
    assert "No live worker serves emails" in text
    rows = {row["name"]: row for row in as_json("queues")}
    assert rows["emails"] == {
        "name": "emails", "due": 1, "running": 0, "paused": False, "served_by": [], "unserved": True
    }  # fmt: skip
    assert rows["default"]["served_by"] == ["w-default"] and not rows["default"]["unserved"]


def test_pause_and_resume_a_queue():
    three_steps.run({}, queue="emails")
    assert "Queue 'emails' paused" in run("queue", "pause", "emails")
    assert "was paused already" in run("queue", "pause", "emails")
    rows = {row["name"]: row for row in as_json("queues")}
    assert rows["emails"]["paused"] and not rows["emails"]["unserved"]
    assert "paused" in run("queues")
    assert as_json("queue", "resume", "emails") == {"name": "emails", "paused": False, "changed": True}
    assert "was not paused" in run("queue", "resume", "emails")


def test_a_bad_queue_name_is_a_clear_error():
    with pytest.raises(CommandError, match="queue must be 1 to 64 characters"):
        run("queue", "pause", "no spaces")


def test_workers_lists_live_ones_first_and_hides_gone_ones_with_live():
    assert "No worker has written a heartbeat row yet" in run("workers")
    _worker("w-old", ["*"], seen_ago=timedelta(hours=1))
    _worker("w-new", ["default", "emails"])
    listed = as_json("workers")
    assert [(w["worker_id"], w["state"]) for w in listed] == [("w-new", "live"), ("w-old", "dead")]
    assert listed[0]["queues"] == ["default", "emails"] and listed[0]["slots_total"] == 4
    assert [w["worker_id"] for w in as_json("workers", "--live")] == ["w-new"]
    text = run("workers")
    assert "w-new" in text and "live" in text and "dead" in text
    WorkerProcess.objects.update(slots_busy=2)  # the dead worker's two runs are lost, not being worked on
    rows = {line.split()[0]: line for line in run("workers").splitlines()[1:] if line.strip()}
    assert "2/4" in rows["w-new"].split() and "2 lost of 4" in rows["w-old"]
