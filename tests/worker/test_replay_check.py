"""``workflows check-replay`` and ``testing.check_replay``: parked runs replayed against changed code, no step run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_openworkflow import workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.testing import assert_replays, check_replay, drain
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)

NAME = "test-replay-check"


def deployed(body: Callable[[Any], Any], version: str | None = None) -> Any:
    """Register ``body`` as the workflow's code (replacing what was there), as a deploy would."""
    registry.unregister(NAME, version)
    return workflow(name=NAME, version=version)(body)


def effect(ctx: Any, step: str) -> Callable[[], str]:
    def run() -> str:
        SideEffect.objects.create(run_id=ctx.run_id, step=step)
        return step

    return run


def original(ctx):
    ctx.step.run("reserve", effect(ctx, "reserve"))
    ctx.step.run("charge", effect(ctx, "charge"))
    ctx.step.wait_for_signal("shipped", timeout="7d")
    ctx.step.run("notify", effect(ctx, "notify"))


def reordered(ctx):  # charges before it reserves: the journal is keyed by name, so both are replayed
    ctx.step.run("charge", effect(ctx, "charge"))
    ctx.step.run("reserve", effect(ctx, "reserve"))
    ctx.step.wait_for_signal("shipped", timeout="7d")
    ctx.step.run("notify", effect(ctx, "notify"))


def dropped(ctx):  # no more "charge": the run would wait without it
    ctx.step.run("reserve", effect(ctx, "reserve"))
    ctx.step.wait_for_signal("shipped", timeout="7d")
    ctx.step.run("notify", effect(ctx, "notify"))


def renamed(ctx):  # "charge" became "bill"
    ctx.step.run("reserve", effect(ctx, "reserve"))
    ctx.step.run("bill", effect(ctx, "charge"))
    ctx.step.wait_for_signal("shipped", timeout="7d")
    ctx.step.run("notify", effect(ctx, "notify"))


def appended(ctx):  # a new step after the wait: runs in flight reach it later, as new
    original(ctx)
    ctx.step.run("thank", effect(ctx, "thank"))


def kind_changed(ctx):  # "charge" is now a sleep
    ctx.step.run("reserve", effect(ctx, "reserve"))
    ctx.step.sleep("charge", "1s")


@pytest.fixture
def parked_run() -> Iterator[Any]:
    """A run of the original code, parked on its signal wait after two steps."""
    handle = deployed(original).run()
    drain()
    assert handle.status() == "running"
    assert StepAttempt.objects.filter(workflow_run_id=handle.id).count() == 3
    yield handle
    registry.unregister(NAME, None)


def writes(run_id: Any) -> tuple[Any, ...]:
    """Everything a check could change: the run row, its journal and the steps' side effects."""
    run = WorkflowRun.objects.filter(id=run_id).values().get()
    journal = list(StepAttempt.objects.filter(workflow_run_id=run_id).order_by("id").values())
    return run, journal, SideEffect.objects.count()


@pytest.mark.parametrize(
    "code", [original, appended, reordered], ids=["unchanged", "a step added after the wait", "reordered"]
)
def test_code_that_keeps_the_journal_replays(parked_run, code):
    deployed(code)
    [finding] = assert_replays(workflows=[NAME])
    assert finding.ok and finding.run_id == parked_run.id


@pytest.mark.parametrize(
    ("code", "step", "found"),
    [(renamed, "charge", "bill"), (dropped, "charge", "shipped")],
    ids=["renamed", "dropped"],
)
def test_code_that_asks_for_another_step_is_reported_with_both_names(parked_run, code, step, found):
    before = writes(parked_run.id)
    deployed(code)
    [finding] = check_replay(workflows=[NAME])
    assert (finding.ok, finding.step, finding.found) == (False, step, found)
    assert f"the code now asks for {found!r} where the journal holds {step!r}" in finding.message
    assert writes(parked_run.id) == before  # no step ran, nothing was written


def test_a_step_recorded_with_another_kind_is_reported(parked_run):
    deployed(kind_changed)
    [finding] = check_replay()
    assert not finding.ok and finding.step == "charge" and "recorded as 'run'" in finding.message


def test_a_version_this_code_no_longer_has_is_reported(parked_run):
    registry.unregister(NAME, None)
    [finding] = check_replay(workflows=[NAME])
    assert not finding.ok and "is registered here" in finding.message


async def original_async(ctx):
    await ctx.step.run("reserve", effect(ctx, "reserve"))
    await ctx.step.run("charge", effect(ctx, "charge"))
    await ctx.step.wait_for_signal("shipped", timeout="7d")


async def renamed_async(ctx):
    await ctx.step.run("reserve", effect(ctx, "reserve"))
    await ctx.step.run("bill", effect(ctx, "charge"))
    await ctx.step.wait_for_signal("shipped", timeout="7d")


def test_async_workflows_are_replayed_too():
    handle = deployed(original_async).run()
    drain()
    assert handle.status() == "running"
    before = writes(handle.id)
    try:
        [finding] = assert_replays(workflows=[NAME])
        assert finding.ok and finding.message == "replays; the code goes on with 'shipped'"
        deployed(renamed_async)
        [finding] = check_replay(workflows=[NAME])
        assert (finding.ok, finding.step, finding.found) == (False, "charge", "bill")
        assert writes(handle.id) == before  # no step ran, nothing was written
    finally:
        registry.unregister(NAME, None)


def test_the_command_exits_1_naming_the_run_and_the_step(parked_run):
    deployed(renamed)
    out = StringIO()
    with pytest.raises(CommandError, match="1 run\\(s\\) in flight would not replay on this code") as raised:
        call_command("workflows", "check-replay", "--workflow", NAME, stdout=out)
    assert raised.value.returncode == 1
    assert str(parked_run.id) in out.getvalue() and "where the journal holds 'charge'" in out.getvalue()
    with pytest.raises(CommandError):
        call_command("workflows", "check-replay", "--json", stdout=(out := StringIO()))
    report = json.loads(out.getvalue())
    assert (report["checked"], report["failed"], report["runs"][0]["step"]) == (1, 1, "charge")


def test_the_command_passes_and_samples(parked_run):
    for _ in range(2):
        deployed(original).run()
    drain()
    out = StringIO()
    call_command("workflows", "check-replay", "--sample", "2", "--workflow", NAME, stdout=out)
    assert "2 run(s) in flight checked, 0 would not replay." in out.getvalue()
    with pytest.raises(CommandError, match="--sample must be at least 1"):
        call_command("workflows", "check-replay", "--sample", "0")
