"""``ctx.wait_for_approval``: a signal wait that only a person's decision completes.

The wait and its approval row are written in one fenced transaction
(``store/approvals.py``); the admin's inbox, the API and
:func:`~django_openworkflow.decide_approval` decide it, and the decision
comes back as the wait's signal. A replay returns the journaled decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils.dateparse import parse_datetime

from ..definitions.payload import check_text
from ..durations import Duration
from ..errors import StepUsageError
from ..states import StepKind
from ..store.records import NewApproval

if TYPE_CHECKING:
    from .steps import StepApi

KINDS = {"user": "users", "group": "groups", "perm": "permissions"}


@dataclass(frozen=True)
class ApprovalDecision:
    """What ``ctx.wait_for_approval`` returns once someone decided.

    ``approved``: approved (True) or rejected (False); ``by``: the username
    of who decided; ``at``: when (the database clock, aware UTC);
    ``comment``: the decider's comment ("" when none).
    """

    approved: bool
    by: str
    at: datetime
    comment: str


def parse_assignees(assignees: str | Iterable[str]) -> dict[str, list[str]]:
    """``["group:managers", "user:alice", "perm:shop.refund"]`` as stored: ``{"users", "groups", "permissions"}``.

    A user is a username (never a primary key: a username of digits must not
    pass for another user's id); a group, its name; a permission,
    ``"app_label.codename"``. Raises :class:`StepUsageError` naming a bad entry.
    """
    entries = [assignees] if isinstance(assignees, str) else list(assignees)
    parsed: dict[str, list[str]] = {"users": [], "groups": [], "permissions": []}
    for entry in entries:
        kind, _, value = entry.partition(":") if isinstance(entry, str) else ("", "", "")
        if kind not in KINDS or not value.strip():
            raise StepUsageError(
                f"assignee {entry!r} is not 'user:<username>', 'group:<name>' or 'perm:<app_label.codename>'"
            )
        if kind == "perm" and value.count(".") != 1:
            raise StepUsageError(f"assignee {entry!r}: a permission is written 'perm:app_label.codename'")
        check_text(value, "assignee")
        parsed[KINDS[kind]].append(value.strip())
    if not entries:
        raise StepUsageError("an approval needs at least one assignee ('user:...', 'group:...' or 'perm:...')")
    return parsed


def wait_for_approval(
    step: StepApi, name: str, assignees: str | Iterable[str], timeout: Duration, details: str
) -> ApprovalDecision | None:
    """``ctx.wait_for_approval``'s work (see :meth:`WorkflowContext.wait_for_approval`)."""
    if not isinstance(name, str) or not name:
        raise StepUsageError(f"approval name must be a non-empty string, got {name!r}")
    if not isinstance(details, str):
        raise StepUsageError(f"details must be a string (what is being approved), got {type(details).__name__}")
    check_text(details, "approval details")
    parsed = parse_assignees(assignees)

    def opens(timeout_at: datetime) -> NewApproval:
        return NewApproval(name, details, parsed, timeout_at)

    output = step._wait(StepKind.SIGNAL, "wait_for_approval", name, timeout, {"approval": name}, approval=opens)
    if output is None:
        return None
    data = output["data"]
    at = parse_datetime(data["at"])
    assert at is not None
    return ApprovalDecision(bool(data["approved"]), data["by"], at, data["comment"])
