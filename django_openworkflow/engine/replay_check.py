"""Replay a run's journal against the code in this process, executing no step, and say where they part.

A deploy changes the code under runs parked for days. Replay matches the
journal by durable key: if the new code asks, at some point, for a step
the journal does not hold while the journal still holds steps the code never
asked for, the run would execute the new step and ignore the recorded ones
from there on. :func:`check_run` finds that before the deploy does.

It drives the workflow function as a worker does, over the run's journal,
through a store that only reads: the first step not in the journal (or any
write: a park, the run's end) stops the replay before its code runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..definitions.registry import registry
from ..store.records import ClaimedRun, EngineInterrupt, RunRecord
from .context import WorkflowContext
from .interrupts import ContinueAsNew, FailRun, Suspend
from .slice import Slice

if TYPE_CHECKING:
    from ..store.interface import EngineStore

READS = frozenset(
    {
        "load_history",
        "holds_lease",
        "is_canceled",
        "run_outcome",
        "run_outcomes",
        "successor_id",
        "is_transient",
        "idempotency_key",  # ctx.scheduled_at
    }
)
"""The store methods a replay may call; any other is a write, which stops the replay."""

AFTERMATH = ("compensate:", "on-failure")
"""Keys of steps the engine adds once a run fails; the workflow function never asks for them."""


@dataclass(frozen=True)
class ReplayFinding:
    """What replaying one run against the current code found. ``ok``: its journal and the code agree."""

    run_id: Any
    workflow_name: str
    version: str | None
    ok: bool
    message: str
    step: str | None = None  # the journal's step the code no longer reaches first
    found: str | None = None  # what the code asked for instead (a step's key, or "the end of the run")


class _Stop(EngineInterrupt):
    """The replay reached what it must not do: start a step (``key``), or write (``write``: the store method)."""

    def __init__(self, key: str = "", write: str = "") -> None:
        super().__init__(key or write)
        self.key = key
        self.write = write


class _ReadOnlyStore:
    """The worker's store for reads; any write stops the replay (nothing is ever written)."""

    def __init__(self, store: EngineStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in READS:
            return getattr(self._store, name)

        def write(*args: Any, **kwargs: Any) -> Any:
            raise _Stop(write=name)

        return write


class _CheckSlice(Slice):
    last_key = ""  # the step the code asked for last

    def enter_step_api(self, api: str, name: Any) -> str:
        self.last_key = super().enter_step_api(api, name)
        return self.last_key

    def starting_new_step(self, key: str, kind: str) -> None:
        raise _Stop(key)


def _reached(stop: _Stop, slice_: _CheckSlice) -> str:
    """What the code asked for where the replay stopped."""
    if stop.key:
        return stop.key
    if stop.write in ("complete_run", "fail_run", "continue_as_new"):
        return "the end of the run"
    return slice_.last_key or "the end of the run"  # a wait re-armed, a park


def check_run(store: EngineStore, run: RunRecord, now: datetime) -> ReplayFinding:
    """Replay ``run`` (its workflow function over its journal) against this process's code."""
    spec = registry.get(run.workflow_name, run.version)

    def finding(ok: bool, message: str, step: str | None = None, found: str | None = None) -> ReplayFinding:
        return ReplayFinding(run.id, run.workflow_name, run.version, ok, message, step, found)

    if spec is None:
        return finding(False, f"no workflow {run.workflow_name!r} version {run.version!r} is registered here")
    claimed = ClaimedRun(run=run, worker_id="openworkflow-replay-check", claimed_at=now)
    slice_ = _CheckSlice(_ReadOnlyStore(store), claimed, spec)
    reached = "the end of the run"
    raised = ""
    try:
        if spec.is_async:
            from .aio import AsyncWorkflowContext, call_async

            call_async(spec, AsyncWorkflowContext(slice_))
        else:
            spec.fn(WorkflowContext(slice_))
    except _Stop as stop:
        reached = _reached(stop, slice_)
    except FailRun as failure:  # a step recorded with another kind: the engine's own determinism check
        return finding(False, str(failure.error.get("message")), failure.error.get("step"))
    except (Suspend, ContinueAsNew):
        reached = slice_.last_key or "the end of the run"
    except EngineInterrupt as interrupt:  # the run's cancel, a lost lease: nothing more to compare
        raised = type(interrupt).__name__
    except Exception as exc:  # the workflow raised: a worker would fail or retry the run from here
        raised = f"{type(exc).__name__}: {exc}"
    finally:
        slice_.active = False
    skipped = [key for key in slice_.history.kinds if key not in slice_._used_keys and not key.startswith(AFTERMATH)]
    if skipped:
        return finding(
            False,
            f"the code now asks for {reached!r} where the journal holds {skipped[0]!r}"
            f" ({len(skipped)} recorded step(s) the code no longer reaches)",
            skipped[0],
            reached,
        )
    if raised:
        return finding(True, f"replays; the workflow then raises {raised} (as a worker's next slice would)")
    return finding(True, f"replays; the code goes on with {reached!r}")
