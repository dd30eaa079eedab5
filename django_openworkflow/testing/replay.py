"""Replay checks for a test suite: do the runs in flight still replay on the code under test?"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.replay_check import ReplayFinding


def check_replay(
    *, workflows: Iterable[str] = (), sample: int | None = None, run_ids: Iterable[Any] | None = None
) -> list[ReplayFinding]:
    """One :class:`~django_openworkflow.engine.replay_check.ReplayFinding` per run in flight (see ``check-replay``)."""
    from ..worker.replay_check import check_replay as check

    return check(workflows=workflows, sample=sample, run_ids=run_ids)


def assert_replays(
    *, workflows: Iterable[str] = (), sample: int | None = None, run_ids: Iterable[Any] | None = None
) -> list[ReplayFinding]:
    """Fail (``AssertionError``, naming each run and step) unless every run in flight replays; else the findings."""
    findings = check_replay(workflows=workflows, sample=sample, run_ids=run_ids)
    bad = [f"run {f.run_id} ({f.workflow_name}): {f.message}" for f in findings if not f.ok]
    if bad:
        raise AssertionError(f"{len(bad)} run(s) in flight would not replay:\n" + "\n".join(bad))
    return findings
