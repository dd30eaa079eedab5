"""Retention: fixed on each run at start, and prune (command, worker sweep) deletes what expired.

Runs on whichever database the suite runs on (SQLite, PostgreSQL, MariaDB).
Finished runs are written as rows with an old ``finished_at``: how a run
finished does not matter to retention, only its status and times.
"""

from __future__ import annotations

import io
import json
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.dispatch import receiver
from django.test import override_settings

from django_openworkflow import hooks, workflow
from django_openworkflow.client.runs import start_run, start_runs
from django_openworkflow.errors import InvalidArgument, WorkflowRegistrationError
from django_openworkflow.models import Event, Gate, Signal, StepAttempt, WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.worker.prune import PRUNE_TURN_PREFIX, prune, take_prune_turn
from tests.conftest import CEILING, race, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DAY = timedelta(days=1)


@workflow(name="ret-plain")
def plain(ctx):
    return ctx.step.run("one", lambda: 1)


@workflow(name="ret-declared", retention="30d")
def declared(ctx):
    return 1


@workflow(name="ret-child", retention="2d")
def child(ctx):
    return ctx.step.run("work", lambda: 2)


@workflow(name="ret-parent", retention="7d")
def parent(ctx):
    handle = ctx.step.start_workflow(child, {}, name="kid")
    return ctx.step.wait_all([handle])


@workflow(name="ret-on-event", on_event="ret-paid", retention="4d")
def on_event(ctx):
    return 1


@workflow(name="ret-loop")
def loop(ctx):
    if ctx.input["n"] < 1:
        ctx.continue_as_new({"n": ctx.input["n"] + 1})
    return ctx.input["n"]


# -- helpers -----------------------------------------------------------------------


def finished_run(
    name: str = "ret-plain", *, retention: timedelta | None = DAY, ago: timedelta = 2 * DAY, **fields: Any
):
    """A finished run row that finished ``ago`` (database clock), with one journal entry."""
    now = get_backend().now()
    values = {"status": "completed", "available_at": now, "finished_at": now - ago, "retention": retention}
    run = WorkflowRun.objects.create(workflow_name=name, **{**values, **fields})
    StepAttempt.objects.create(workflow_run=run, step_name="one", kind="run", status="completed")
    return run


def exists(run) -> bool:
    return WorkflowRun.objects.filter(id=run.id).exists()


# -- fixed at start ------------------------------------------------------------------


def test_retention_is_fixed_at_start_start_then_workflow_then_setting():
    assert plain.run().fetch().retention is None  # the default: kept until deleted by hand
    with override_settings(OPENWORKFLOW={"RETENTION": "1d"}):
        assert plain.run().fetch().retention == DAY
        assert declared.run().fetch().retention == 30 * DAY
        assert declared.run(retention="90d").fetch().retention == 90 * DAY
        assert start_run("ret-plain", retention=timedelta(hours=5)).fetch().retention == timedelta(hours=5)
        handles = plain.run_many([1, 2], retention="3d") + start_runs("ret-declared", [1])
        assert [h.fetch().retention for h in handles] == [3 * DAY, 3 * DAY, 30 * DAY]
    # The setting changing later does not change runs already started.
    assert WorkflowRun.objects.filter(workflow_name="ret-plain", retention=DAY).count() == 1


def test_max_retention_caps_what_runs_get():
    with override_settings(OPENWORKFLOW={"MAX_RETENTION": "10d"}):
        assert declared.run().fetch().retention == 10 * DAY
        assert plain.run(retention="5d").fetch().retention == 5 * DAY
        assert plain.run().fetch().retention == 10 * DAY  # "forever" is capped too


def test_children_get_their_own_retention_and_a_successor_keeps_its_predecessors(run_worker):
    top = parent.run(retention="9d")
    chain = loop.run({"n": 0}, retention="5d")
    run_worker(until=lambda: top.status() == "completed" and chain.status() == "continued")
    run_worker(until=lambda: WorkflowRun.objects.filter(workflow_name="ret-loop", status="completed").exists())
    assert top.fetch().retention == 9 * DAY
    assert WorkflowRun.objects.get(workflow_name="ret-child").retention == 2 * DAY
    successor = chain.successor()
    assert successor is not None and successor.fetch().retention == 5 * DAY


def test_event_starts_and_reruns_get_a_retention_too():
    from django_openworkflow.client import operations
    from django_openworkflow.client.events import send_event

    send_event("ret-paid", {"order": 1})
    assert WorkflowRun.objects.get(workflow_name="ret-on-event").retention == 4 * DAY
    first = finished_run(retention=6 * DAY, ago=DAY)
    again = operations.rerun(first.id)
    assert WorkflowRun.objects.get(id=again).retention == 6 * DAY  # a re-run keeps the run's retention


@pytest.mark.parametrize("value", ["-1s", "0s", 0, "soon", [30], timedelta(seconds=-5), True])
def test_a_bad_declared_retention_is_refused_at_decoration(value):
    with pytest.raises(WorkflowRegistrationError, match="retention"):
        workflow(name="ret-bad", retention=value)(lambda ctx: None)


@pytest.mark.parametrize("value", ["-1s", "0ms", "soon", {"d": 1}])
def test_a_bad_start_retention_is_refused_and_nothing_is_written(value):
    with pytest.raises(InvalidArgument, match="retention") as caught:
        plain.run(retention=value)
    assert caught.value.argument == "retention"
    with pytest.raises(InvalidArgument, match="retention"):
        plain.run_many([1, 2], retention=value)
    assert not WorkflowRun.objects.exists()


def test_a_bad_retention_setting_is_named():
    with override_settings(OPENWORKFLOW={"RETENTION": "a while"}), pytest.raises(InvalidArgument, match="'RETENTION'"):
        plain.run()
    assert not WorkflowRun.objects.exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [("RETENTION", "a while"), ("MAX_RETENTION", "-1d"), ("PRUNE_INTERVAL", "often"), ("PRUNE_BATCH_SIZE", 0)],
)
def test_bad_retention_settings_fail_the_system_checks(key, value):
    from django_openworkflow.checks import check_settings

    with override_settings(OPENWORKFLOW={key: value}):
        errors = [m for m in check_settings() if m.id == "openworkflow.E040"]
    assert len(errors) == 1 and key in errors[0].msg


# -- prune ---------------------------------------------------------------------------


def test_prune_deletes_expired_finished_runs_with_their_journals_and_signals():
    expired = [finished_run(status=status) for status in ("completed", "failed", "canceled")]
    Signal.objects.create(
        workflow_run=expired[0], name="go", consumed_by=StepAttempt.objects.filter(workflow_run=expired[0]).first()
    )
    Signal.objects.create(workflow_run=expired[1], name="late")
    fresh = finished_run(ago=timedelta(hours=1))
    forever = finished_run(retention=None, ago=1000 * DAY)
    other_retention = finished_run(retention=5 * DAY, ago=3 * DAY)
    # Unfinished runs are never deleted, whatever their times say.
    pending = finished_run(status="pending")
    held = finished_run(status="running", worker_id="w1")
    parked = finished_run(status="running", worker_id=None)

    result = prune()

    assert result.runs == {"ret-plain": 3}
    assert not any(exists(run) for run in expired)
    assert not StepAttempt.objects.filter(workflow_run_id__in=[r.id for r in expired]).exists()
    assert not Signal.objects.exists()
    assert all(exists(run) for run in (fresh, forever, other_retention, pending, held, parked))
    assert StepAttempt.objects.filter(workflow_run=fresh).count() == 1


def test_a_child_of_an_unfinished_parent_is_kept_and_links_to_deleted_runs_are_cleared():
    running_parent = finished_run("ret-parent", status="running", worker_id=None, retention=None)
    step = StepAttempt.objects.create(workflow_run=running_parent, step_name="kid", kind="workflow", status="running")
    kept_child = finished_run("ret-child", parent_step_attempt=step)
    StepAttempt.objects.filter(id=step.id).update(child_workflow_run=kept_child)

    # A finished parent kept longer than its expired child: the child goes, the parent's step stays unlinked.
    long_parent = finished_run("ret-parent", retention=30 * DAY)
    long_step = StepAttempt.objects.create(
        workflow_run=long_parent, step_name="kid", kind="workflow", status="completed"
    )
    gone_child = finished_run("ret-child", parent_step_attempt=long_step)
    StepAttempt.objects.filter(id=long_step.id).update(child_workflow_run=gone_child)

    # An expired parent whose child still runs: the child stays, without its parent.
    old_parent = finished_run("ret-parent", status="canceled")
    old_step = StepAttempt.objects.create(workflow_run=old_parent, step_name="kid", kind="workflow", status="failed")
    orphan = finished_run("ret-child", status="running", worker_id=None, parent_step_attempt=old_step)

    # A continued run expires before its successor, which stays.
    predecessor = finished_run("ret-loop", status="continued")
    successor = finished_run("ret-loop", status="running", worker_id=None, continued_from=predecessor)

    result = prune()

    assert result.runs == {"ret-child": 1, "ret-parent": 1, "ret-loop": 1}
    assert exists(kept_child) and exists(long_parent) and exists(orphan) and exists(successor)
    assert not exists(gone_child) and not exists(old_parent) and not exists(predecessor)
    assert StepAttempt.objects.get(id=long_step.id).child_workflow_run_id is None
    assert WorkflowRun.objects.get(id=orphan.id).parent_step_attempt_id is None
    assert WorkflowRun.objects.get(id=successor.id).continued_from_id is None
    assert WorkflowRun.objects.get(id=kept_child.id).parent_step_attempt_id == step.id


def test_prune_works_in_bounded_batches_and_reports_each():
    for _ in range(5):
        finished_run()
    sent: list[tuple[str, int]] = []

    @receiver(hooks.runs_pruned)
    def count(sender, *, workflow_name, count, **kwargs):
        sent.append((workflow_name, count))

    try:
        result = prune(batch_size=2)
    finally:
        hooks.runs_pruned.disconnect(count)
    assert result.runs == {"ret-plain": 5}
    assert sent == [("ret-plain", 2), ("ret-plain", 2), ("ret-plain", 1)]


def test_a_batch_that_finds_every_run_locked_for_a_moment_does_not_end_the_prune():
    # MariaDB beside a busy claim loop gave empty batches with thousands of runs left: a prune
    # that stopped at the first one left them all. Here another transaction holds them a moment.
    from django.db import connections, transaction

    if not connections["default"].features.has_select_for_update_skip_locked:
        pytest.skip("no SKIP LOCKED on this database: a prune waits for locked rows instead")
    runs = [finished_run() for _ in range(3)]
    held, release = threading.Event(), threading.Event()

    def hold_them():
        try:
            with transaction.atomic(using=get_backend().alias):
                list(WorkflowRun.objects.select_for_update().filter(id__in=[run.id for run in runs]))
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_them)
    holder.start()
    held.wait(10)
    threading.Timer(0.05, release.set).start()  # let go once the prune has met an empty batch
    try:
        result = prune()
    finally:
        release.set()
        holder.join(10)
    assert result.runs == {"ret-plain": 3} and not any(exists(run) for run in runs)


def test_the_idempotency_key_of_a_pruned_run_can_be_used_again():
    first = plain.run(idempotency_key="order-1", retention="1d")
    now = get_backend().now()
    WorkflowRun.objects.filter(id=first.id).update(status="completed", finished_at=now - 2 * DAY)
    assert not plain.run(idempotency_key="order-1").created  # kept: the key still answers
    prune()
    again = plain.run(idempotency_key="order-1")
    assert again.created and again.id != first.id


def test_a_dry_run_counts_and_deletes_nothing():
    runs = [finished_run(), finished_run("ret-child")]
    out = io.StringIO()
    call_command("workflows", "prune", "--dry-run", stdout=out)
    assert "would delete 2 runs" in out.getvalue()
    assert all(exists(run) for run in runs)
    out = io.StringIO()
    call_command("workflows", "prune", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"dry_run": False, "runs": {"ret-child": 1, "ret-plain": 1}, "events": 0}
    assert not any(exists(run) for run in runs)


def test_older_than_prunes_runs_without_retention_after_a_confirmation():
    legacy = finished_run(retention=None, ago=100 * DAY)
    recent = finished_run(retention=None, ago=10 * DAY)
    with pytest.raises(CommandError, match="--yes"):
        call_command("workflows", "prune", "--older-than", "90d", stdout=io.StringIO())
    assert exists(legacy)
    out = io.StringIO()
    call_command("workflows", "prune", "--older-than", "90d", "--dry-run", stdout=out)
    assert "would delete 1 run" in out.getvalue() and exists(legacy)
    call_command("workflows", "prune", "--older-than", "90d", "--no-input", stdout=io.StringIO())
    assert not exists(legacy) and exists(recent)


def test_a_bad_older_than_is_refused():
    with pytest.raises(CommandError, match="older-than"):
        call_command("workflows", "prune", "--older-than", "soon", "--yes", stdout=io.StringIO())


def test_two_concurrent_prunes_delete_each_run_once():
    for _ in range(40):
        finished_run()
    results = race(lambda: prune(batch_size=3).runs["ret-plain"], n=4)
    assert sum(results) == 40
    assert not WorkflowRun.objects.exists()


def test_events_older_than_the_global_retention_are_pruned():
    old = Event.objects.create(event_type="paid", payload={})
    new = Event.objects.create(event_type="paid", payload={})
    Event.objects.filter(id=old.id).update(created_at=get_backend().now() - 2 * DAY)
    assert prune().events == 0  # no global retention: events are kept
    with override_settings(OPENWORKFLOW={"RETENTION": "1d"}):
        assert prune().events == 1
    assert list(Event.objects.values_list("id", flat=True)) == [new.id]


def test_one_prune_turn_per_interval():
    interval = timedelta(hours=1)
    assert take_prune_turn(interval)
    assert not take_prune_turn(interval)
    assert Gate.objects.filter(name__startswith=PRUNE_TURN_PREFIX).count() == 1


def test_the_show_command_says_when_a_run_expires():
    run = finished_run(retention=30 * DAY, ago=DAY)
    out = io.StringIO()
    call_command("workflows", "show", str(run.id), stdout=out)
    assert "expires" in out.getvalue()
    pending = plain.run(retention="30d")
    out = io.StringIO()
    call_command("workflows", "show", str(pending.id), stdout=out)
    assert "30 d after it finishes" in out.getvalue()
    out = io.StringIO()
    call_command("workflows", "show", str(plain.run().id), stdout=out)
    assert "never" in out.getvalue()
    out = io.StringIO()
    call_command("workflows", "show", str(run.id), "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["retention_seconds"] == 30 * 86400 and shown["expires_at"].startswith(
        (run.finished_at + 30 * DAY).date().isoformat()
    )


def test_a_worker_prunes_on_its_own(workers, monkeypatch):
    expired = [finished_run() for _ in range(3)]
    kept = finished_run(ago=timedelta(hours=1))
    monkeypatch.setenv("OWF_TEST_PRUNE_INTERVAL", "1s")
    workers.start("--poll", "50ms")
    workers.start("--poll", "50ms")
    wait_until(lambda: not any(exists(run) for run in expired), timeout=CEILING)
    assert exists(kept)


# -- the admin -----------------------------------------------------------------------


def test_the_run_page_says_when_a_run_expires_in_english_and_french(admin_client, settings):
    from tests.admin.helpers import run_url
    from tests.admin.test_i18n import left_in_english

    middleware = list(settings.MIDDLEWARE)  # LocaleMiddleware, as tests/admin/test_i18n.py's "localized" adds it
    middleware.insert(middleware.index("django.contrib.sessions.middleware.SessionMiddleware") + 1,
                      "django.middleware.locale.LocaleMiddleware")  # fmt: skip
    settings.MIDDLEWARE = middleware
    settings.LANGUAGE_CODE = "en"
    expired = finished_run(retention=DAY, ago=2 * DAY)
    later = finished_run(retention=30 * DAY, ago=DAY)
    unfinished = plain.run(retention="30d").fetch()
    forever = plain.run().fetch()
    english = {run: admin_client.get(run_url(run)).content.decode() for run in (expired, later, unfinished, forever)}
    assert all("Expires" in page for page in english.values())
    assert "due for pruning" in english[expired] and "due for pruning" not in english[later]
    assert "when finished, after 30 d" in english[unfinished]
    assert "never: kept until deleted by hand" in english[forever]
    for run in (expired, unfinished, forever):
        assert left_in_english(admin_client, run_url(run)) == []
    french = admin_client.get(run_url(unfinished), HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Expire" in french and "une fois terminée, après 30 d" in french
