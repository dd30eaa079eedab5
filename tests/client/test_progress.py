"""``ctx.publish`` and ``handle.get_event``, ``ctx.stream`` and ``handle.stream`` (client/ and engine/progress.py)."""

from __future__ import annotations

import signal
from datetime import timedelta

import pytest

from django_openworkflow import EventNotPublished, ProgressTimeout, workflow
from django_openworkflow.models import PublishedValue, StreamChunk
from django_openworkflow.testing import drain
from tests.conftest import CEILING, wait_until
from tests.fixtures.progress_workflows import progress_chunks, progress_steps
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def test_published_values_and_stream_chunks_are_read_back():
    handle = progress_steps.run()
    drain()
    assert handle.result() == "done"
    assert handle.get_event("percent", timeout=0) == 100
    assert list(handle.stream("log")) == ["step 0", "step 1", "step 2"]
    assert list(handle.stream("log", offset=2)) == ["step 2"]
    assert list(handle.stream("log", offset=5)) == []
    assert list(handle.stream("nothing", follow=False)) == []
    # Published once per step boundary: one row per key, at the latest value.
    assert list(PublishedValue.objects.filter(workflow_run_id=handle.id).values_list("key", "value")) == [
        ("percent", 100)
    ]


def test_get_event_waits_until_timeout_then_says_so():
    handle = progress_steps.run()
    with pytest.raises(ProgressTimeout, match="did not publish 'percent' within 0.05s"):
        handle.get_event("percent", timeout=0.05)
    with pytest.raises(ProgressTimeout, match="gave no chunk at offset 0"):
        list(handle.stream("log", timeout=0.05))
    assert list(handle.stream("log", follow=False)) == []


def test_a_finished_run_that_never_published_a_key_says_so():
    handle = progress_steps.run()
    drain()
    with pytest.raises(EventNotPublished, match="without publishing 'other'"):
        handle.get_event("other", timeout=5)


@pytest.mark.parametrize("offset", [-1, "3", True])
def test_a_bad_offset_is_refused(offset):
    handle = progress_steps.run()
    with pytest.raises(ValueError, match="offset must be an integer of at least 0"):
        next(iter(handle.stream("log", offset=offset)))


@workflow(name="progress-misuse")
def progress_misuse(ctx):
    what = ctx.input["what"]
    if what == "in-step":
        ctx.step.run("s", lambda: ctx.publish("k", 1))
    elif what == "not-json":
        ctx.stream("s").write(object())
    elif what == "bad-name":
        ctx.stream("")
    return "ok"


@pytest.mark.parametrize(
    ("what", "error", "says"),
    [
        ("in-step", "StepFailed", "StepUsageError: ctx.publish() was called inside step 's'"),
        ("not-json", "PayloadError", "chunk of stream 's'"),
        ("bad-name", "StepUsageError", "the stream name must be a non-empty string"),
    ],
)
def test_misuse_fails_the_run_with_a_clear_error(what, error, says):
    handle = progress_misuse.run({"what": what})
    drain()
    run = handle.fetch()
    assert run.status == "failed"
    assert run.error["type"] == error
    assert says in run.error["message"]


def test_a_run_writing_1000_chunks_across_a_worker_kill_delivers_each_once_in_order(workers):
    handle = progress_chunks.run({"chunks": 1000, "every": 100, "hang_at": 500})
    first = workers.start("--lease", "1s", "--poll", "20ms")
    wait_until(lambda: SideEffect.objects.filter(run_id=handle.id, step="hang").exists())
    # The chunks before the hanging step were committed with its start: a reader takes some and leaves.
    got = []
    for chunk in handle.stream("out", follow=False):
        got.append(chunk)
        if len(got) == 321:
            break
    assert handle.get_event("written", timeout=0) == 500  # published just before the step, with its start
    assert StreamChunk.objects.filter(workflow_run_id=handle.id).count() == 500
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    workers.start("--lease", "1s", "--poll", "20ms")
    # It comes back with its offset and follows the stream to the run's end, across the replay (the
    # new worker's first chunk comes after a subprocess's start, the lease's end and a replay: a
    # gap of over 30 s at a load of 28).
    got += list(handle.stream("out", offset=len(got), timeout=CEILING))
    assert got == [{"i": i} for i in range(1000)]
    assert handle.result(timeout=CEILING) == 1000
    assert StreamChunk.objects.filter(workflow_run_id=handle.id).count() == 1000
    assert handle.get_event("written") == 1000
    assert handle.get_event("status") == "done"
    assert SideEffect.objects.filter(run_id=handle.id, step="hang").count() == 2


def test_published_values_and_chunks_are_pruned_with_their_run():
    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.worker.prune import prune

    kept, pruned = progress_steps.run(), progress_steps.run()
    drain()
    WorkflowRun.objects.filter(id=pruned.id).update(retention=timedelta(0))
    assert prune().runs == {"progress-steps": 1}
    assert not PublishedValue.objects.filter(workflow_run_id=pruned.id).exists()
    assert not StreamChunk.objects.filter(workflow_run_id=pruned.id).exists()
    assert list(kept.stream("log")) == ["step 0", "step 1", "step 2"]
