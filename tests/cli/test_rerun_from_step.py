"""``workflows rerun RUN_ID --from-step NAME``, and how ``show`` tells a re-run and its copied steps."""

from __future__ import annotations

import pytest
from django.core.management import CommandError

from django_openworkflow.models import WorkflowRun
from django_openworkflow.testing import drain
from tests.cli.helpers import as_json, workflows
from tests.fixtures.rerun_workflows import C_BROKEN, rerun_abc, rerun_parent
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


def test_rerun_from_a_step_copies_the_steps_before_it_and_show_says_so() -> None:
    SideEffect.objects.create(run_id=C_BROKEN, step="c-broken")
    source = rerun_abc.run()
    drain()
    SideEffect.objects.filter(run_id=C_BROKEN).delete()
    text = workflows("rerun", str(source.id)[:8], "--from-step", "b")
    new = WorkflowRun.objects.get(rerun_of=source.id)
    assert text.strip() == (
        f"Started run {new.id} of rerun-abc, a re-run of run {source.id} from step 'b' (the steps before it copied)."
    )
    drain()
    shown = workflows("show", str(new.id))
    assert f"re-run of        {source.id} from step 'b' (the steps before it copied)" in shown
    journal = [line.split() for line in shown.splitlines() if line.split()[1:2] in (["a"], ["b"], ["c"])]
    assert [(row[1], row[3:5]) for row in journal] == [
        ("a", ["completed", "(copied)"]),
        ("b", ["completed", "1"]),
        ("c", ["completed", "1"]),
    ]
    data = as_json("show", str(new.id))
    assert (data["rerun_of"], data["rerun_from_step"]) == (str(source.id), "b")
    assert [step["copied_from"] is not None for step in data["steps"]] == [True, False, False]
    again = as_json("rerun", str(source.id), "--from-step", "c")
    assert (again["rerun_of"], again["rerun_from_step"], again["status"]) == (str(source.id), "c", "pending")


def test_rerun_from_a_step_that_cannot_be_replayed_is_refused_with_the_reason() -> None:
    source = rerun_parent.run()
    drain()
    with pytest.raises(CommandError, match=r"cannot rerun run .*: step 'rerun-leaf' before it started child run"):
        workflows("rerun", str(source.id), "--from-step", "b")
    with pytest.raises(CommandError, match=r"it has no step 'nope' in its journal \(its steps: a, rerun-leaf, b\)"):
        workflows("rerun", str(source.id), "--from-step", "nope")
    assert not WorkflowRun.objects.filter(rerun_of=source.id).exists()
