"""Workflow functions and a dispatcher for tests/test_event_starts.py.

Nothing is registered at import: an ``on_event`` workflow registered for the
whole process would start runs from every other test's ``send_event``. The
tests declare them in a fixture and unregister them afterwards.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from django_openworkflow.client.dispatcher import Dispatcher


def echo(ctx: Any) -> Any:
    """Returns its input: the event's payload."""
    return ctx.input


def echo_again(ctx: Any) -> Any:
    return {"again": ctx.input}


dispatched: list[Any] = []
"""Run ids :class:`OnCommitDispatcher` was told about, once their transaction committed."""


class OnCommitDispatcher(Dispatcher):
    """Records started runs after the commit, as the Celery dispatcher sends them."""

    def run_started(self, run_id: Any, queue: str = "default") -> None:
        transaction.on_commit(lambda: dispatched.append((run_id, queue)))
