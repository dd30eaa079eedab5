"""Waits for a message: ``ctx.step.wait_for_signal`` and ``ctx.step.wait_for_event``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime

from .. import hooks
from ..definitions.payload import check_text, to_json_value
from ..durations import Duration, parse_duration
from ..errors import StepUsageError
from ..states import StepKind, StepStatus
from ..store.records import NewApproval, NewAttempt
from .interrupts import Suspend

if TYPE_CHECKING:
    from .slice import Slice


def approval_opened(s: Slice, key: str, approval: NewApproval) -> None:
    """Send the ``approval_opened`` hook once the approval's row is committed (its notification)."""
    hooks.send(
        hooks.approval_opened,
        s.run.workflow_name,
        run_id=s.run.id,
        step=key,
        name=approval.name,
        details=approval.details,
        assignees=approval.assignees,
        timeout_at=approval.timeout_at,
        form=approval.form,
        due_at=approval.due_at,
    )


class WaitSteps:
    """``wait_for_signal`` and ``wait_for_event``: a mixin of :class:`~django_openworkflow.engine.steps.StepApi`."""

    _slice: Slice  # set by StepApi

    def wait_for_signal(self, name: str, *, timeout: Duration = "7d") -> Any:
        """Park until a signal called ``name`` is sent to this run; return its data.

        Signals sent before the run reaches the wait are buffered and taken in
        order (FIFO per name). Returns ``None`` on timeout; the timeout is
        journaled, so a replay returns ``None`` again and a late signal stays
        buffered for the next wait.
        """
        if not isinstance(name, str) or not name:
            raise StepUsageError(f"signal name must be a non-empty string, got {name!r}")
        output = self._wait(StepKind.SIGNAL, "wait_for_signal", name, timeout, {"signal": name}, signal_name=name)
        return None if output is None else output.get("data")

    def wait_for_event(
        self, name: str, *, event: str, match: dict[str, Any] | None = None, timeout: Duration = "7d"
    ) -> Any:
        """Park until an event of type ``event`` whose payload contains ``match`` is sent; return the payload.

        Containment is JSON containment (PostgreSQL's ``@>``): every key of
        ``match`` is in the payload with a value that contains the pattern's.
        Only events sent after the run started waiting count. ``None`` on
        timeout, journaled like a signal's.
        """
        if not isinstance(event, str) or not event:
            raise StepUsageError(f"event type must be a non-empty string, got {event!r}")
        check_text(event, "event type")
        pattern = to_json_value(match or {}, f"match of event wait {name!r}", "match")
        if not isinstance(pattern, dict):
            raise StepUsageError(f"match must be a dict, got {match!r}")
        context = {"event": event, "match": pattern}
        output = self._wait(StepKind.EVENT, "wait_for_event", name, timeout, context, event_type=event)
        return None if output is None else output.get("payload")

    def _wait(
        self,
        kind: str,
        api: str,
        name: str,
        timeout: Duration,
        context: dict[str, Any],
        signal_name: str | None = None,
        event_type: str | None = None,
        approval: Callable[[datetime, datetime], NewApproval] | None = None,
    ) -> dict[str, Any] | None:
        """The shared wait: returns the delivered output dict, or None on timeout; parks otherwise.

        ``approval`` makes the approval a new wait opens, given the time and its timeout (``approvals.py``).
        """
        s = self._slice
        wait = parse_duration(timeout)
        key = s.enter_step_api(api, name)
        done = s.recorded(key, kind)
        if done is not None:
            return None if (done.output or {}).get("timed_out") else done.output
        now = s.now()
        waiting = s.history.open.get(key)
        if waiting is None:
            s.starting_new_step(key, kind)
            s.check_can_start(key)
            timeout_at = now + wait
            insert = NewAttempt(
                key, kind, StepStatus.RUNNING, started_at=now, context={**context, "timeout_at": timeout_at.isoformat()}
            )
            until = s.park_limit(timeout_at)
            opens = None if approval is None else approval(now, timeout_at)
            signal = s.wait_for_delivery(
                insert=insert, park_until=until, signal_name=signal_name, event_type=event_type, approval=opens
            )
            if opens is not None:
                approval_opened(s, key, opens)
            if signal is not None:
                return {"signal_id": signal.id, "data": signal.data}
            raise Suspend(until, f"{api} {key!r}", written=True)
        expires_at = parse_datetime((waiting.context or {})["timeout_at"])
        assert expires_at is not None
        if now >= expires_at:
            delivered: dict[str, Any] | None = s.expire_wait(waiting.id)
            return delivered
        s.check_deadline(now, key)
        s.refuse_if_canceling()  # before the park is written: a canceling run compensates instead
        until = s.park_limit(expires_at)
        s.wait_for_delivery(waiting_attempt_id=waiting.id, park_until=until)
        raise Suspend(until, f"{api} {key!r}", written=True)
