"""Eager mode: each started run executed to completion on the starting thread, once its start commits.

``OPENWORKFLOW["DISPATCH"] = "django_openworkflow.testing.EagerDispatcher"``
(re-exported by :mod:`django_openworkflow.testing`, the path users write).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..client.dispatcher import Dispatcher
from ..definitions.flow import DEFAULT_QUEUE
from . import ALL_QUEUES, WorkflowRunner, _as_uuid, _local

if TYPE_CHECKING:
    import uuid

    from ..engine.execute import SliceResult

__all__ = ["EagerDispatcher", "execute_eagerly"]


class EagerDispatcher(Dispatcher):
    """Executes each started run to completion on the starting thread, as soon as its start commits.

    For tests: ``OPENWORKFLOW = {"DISPATCH": "django_openworkflow.testing.EagerDispatcher"}``.
    Sleeps, backoffs and scheduled starts are skipped; child runs are
    executed too. A run that waits for a signal or an event stops there:
    send it, then call :func:`drain`. A start that rolls back executes
    nothing. Under Django's ``TestCase`` (which never commits) wrap the code
    that starts runs in ``captureOnCommitCallbacks(execute=True)``. A run
    started from inside a run being executed eagerly is executed by the same
    drain, after the slice that started it.
    """

    def run_started(self, run_id: Any, queue: str = DEFAULT_QUEUE) -> None:
        from ..store.commits import after_callers_commits

        # The start's own transaction, and the caller's on every other alias (its writes on
        # "default" when the workflow tables are elsewhere): the run executes once all commit.
        after_callers_commits(lambda: _after_the_test_transaction(run_id))


def _after_the_test_transaction(run_id: Any) -> None:
    """Execute the run now, or, inside a ``TestCase``'s transaction, when ``captureOnCommitCallbacks`` says.

    That transaction never commits, so the run waits for it as ``on_commit``
    callbacks do: on ``default`` if it is in one (what
    ``captureOnCommitCallbacks()`` watches unless told ``using=``), else on
    the workflow alias.
    """
    from django.db import DEFAULT_DB_ALIAS, connections, transaction

    from ..conf import owf_settings

    for alias in dict.fromkeys([DEFAULT_DB_ALIAS, owf_settings.database]):
        if connections[alias].in_atomic_block:
            transaction.on_commit(lambda: execute_eagerly(run_id), using=alias)
            return
    execute_eagerly(run_id)


def execute_eagerly(run_id: Any) -> list[SliceResult]:
    """Execute one run (and its children) until it finishes or waits for a signal or an event."""
    drains: list[set[uuid.UUID] | None] = getattr(_local, "drains", [])
    if drains:
        # Started from a run that is executing on this thread: the drain in progress takes it.
        scope = drains[-1]
        if scope is not None:
            scope.add(_as_uuid(run_id))
        return []
    return WorkflowRunner(queues=ALL_QUEUES).drain(run_ids=[run_id])  # eager: whatever its queue
