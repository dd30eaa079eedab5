"""``ctx.wait_for_approval`` and ``ctx.wait_for_input``: signal waits that only a person completes.

The wait and its approval row are written in one fenced transaction
(``store/approvals.py``); the admin's inbox, the API and
:func:`~django_openworkflow.decide_approval` decide an approval, and
:func:`~django_openworkflow.submit_task` submits a task's form; the decision
or the form's data comes back as the wait's signal. A replay returns what
was journaled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils.dateparse import parse_datetime

from ..definitions.forms import form_path, json_safe, opening_form
from ..definitions.payload import check_text
from ..durations import Duration, parse_duration
from ..errors import StepUsageError
from ..states import StepKind
from ..store.records import NewApproval

if TYPE_CHECKING:
    from django import forms

    from .steps import StepApi

KINDS = {"user": "users", "group": "groups", "perm": "permissions"}
MAX_APPROVALS = 100
"""The most approvals one approval may require (``approvals_required``)."""


@dataclass(frozen=True)
class ApprovalDecision:
    """What ``ctx.wait_for_approval`` returns once someone decided.

    ``approved``: approved (True) or rejected (False); ``by``: the username
    of who decided (with several approvals required: the last approver, or
    who rejected); ``at``: when (the database clock, aware UTC);
    ``comment``: the decider's comment ("" when none); ``approvers``: the
    usernames of everyone who approved, in order.
    """

    approved: bool
    by: str
    at: datetime
    comment: str
    approvers: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskSubmission:
    """What ``ctx.wait_for_input`` returns once someone submitted the task's form.

    ``data``: the form's ``cleaned_data`` as JSON (a model instance as its
    primary key, a queryset as a list of them, a ``Decimal`` as its exact
    text, dates and times in ISO 8601); ``by``: the username of who
    submitted it; ``at``: when (the database clock, aware UTC).
    """

    data: dict[str, Any]
    by: str
    at: datetime


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


def _checked(name: str, details: str, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise StepUsageError(f"{what} name must be a non-empty string, got {name!r}")
    if not isinstance(details, str):
        raise StepUsageError(f"details must be a string (what the {what} is about), got {type(details).__name__}")
    check_text(details, f"{what} details")


def _at(delivered: dict[str, Any]) -> datetime:
    at = parse_datetime(delivered["at"])
    assert at is not None
    return at


def parse_excluded(exclude: str | Iterable[str]) -> list[str]:
    """``["user:ada"]`` as stored: the usernames. Only users are excluded; :class:`StepUsageError` names a bad entry."""
    entries = [exclude] if isinstance(exclude, str) else list(exclude)
    users = []
    for entry in entries:
        kind, _, value = entry.partition(":") if isinstance(entry, str) else ("", "", "")
        if kind != "user" or not value.strip():
            raise StepUsageError(f"exclude {entry!r} is not 'user:<username>': an approval excludes users")
        check_text(value, "excluded user")
        users.append(value.strip())
    return users


@dataclass(frozen=True)
class TaskTimers:
    """When a task is due, and its reminders and escalation, as ``ctx.wait_for_*`` take them (checked when called)."""

    due: Duration | datetime | None = None
    remind_every: Duration | None = None
    escalate_after: Duration | None = None
    escalate_to: str | Iterable[str] = ()

    def check(self, what: str) -> tuple[timedelta | None, timedelta | None, dict[str, list[str]]]:
        """The reminders' period, the escalation's delay and assignees; :class:`StepUsageError` naming a mistake."""
        remind = None if self.remind_every is None else _positive(self.remind_every, "remind_every", what)
        escalate = None if self.escalate_after is None else _positive(self.escalate_after, "escalate_after", what)
        entries = [self.escalate_to] if isinstance(self.escalate_to, str) else list(self.escalate_to)
        if (escalate is None) != (not entries):
            raise StepUsageError(
                f"{what}: escalate_after and escalate_to go together (after how long, to whom: 'group:managers')"
            )
        return remind, escalate, parse_assignees(entries) if entries else {}

    def due_at(self, what: str, now: datetime, timeout_at: datetime) -> datetime | None:
        """When the task is due: ``due`` from ``now``, or as given; :class:`StepUsageError` if after the timeout."""
        if self.due is None:
            return None
        due_at = self.due if isinstance(self.due, datetime) else now + parse_duration(self.due)
        if due_at.tzinfo is None:
            raise StepUsageError(f"due must be a duration or an aware datetime, got the naive {self.due!r}")
        if due_at > timeout_at:
            raise StepUsageError(f"{what} is due after it times out: give a due before its timeout")
        return due_at


MIN_REMINDER = timedelta(minutes=1)
"""The shortest ``remind_every``: reminders are mails, and the workers' timer sweep looks about once a minute."""


def _positive(value: Duration, parameter: str, what: str) -> timedelta:
    try:
        period = parse_duration(value)
    except (TypeError, ValueError) as exc:
        raise StepUsageError(f"{what}: {parameter} is not a duration ({exc})") from None
    if period <= timedelta(0):
        raise StepUsageError(f"{what}: {parameter} must be positive, got {value!r}")
    if parameter == "remind_every" and period < MIN_REMINDER:
        raise StepUsageError(f"{what}: remind_every must be at least {MIN_REMINDER}, got {value!r}")
    return period


def wait_for_approval(
    step: StepApi,
    name: str,
    assignees: str | Iterable[str],
    timeout: Duration,
    details: str,
    approvals_required: int = 1,
    exclude: str | Iterable[str] = (),
    timers: TaskTimers = TaskTimers(),
) -> ApprovalDecision | None:
    """``ctx.wait_for_approval``'s work (see :meth:`WorkflowContext.wait_for_approval`)."""
    _checked(name, details, "approval")
    remind, escalate, escalate_to = timers.check(f"approval {name!r}")
    parsed = parse_assignees(assignees)
    excluded = parse_excluded(exclude)
    if (
        isinstance(approvals_required, bool)
        or not isinstance(approvals_required, int)
        or not 1 <= approvals_required <= MAX_APPROVALS
    ):
        raise StepUsageError(
            f"approvals_required must be a whole number from 1 to {MAX_APPROVALS}, got {approvals_required!r}"
        )

    def opens(now: datetime, timeout_at: datetime) -> NewApproval:
        return NewApproval(
            name,
            details,
            parsed,
            timeout_at,
            due_at=timers.due_at(f"approval {name!r}", now, timeout_at),
            required=approvals_required,
            excluded=excluded,
            remind_every=remind,
            escalate_at=None if escalate is None else now + escalate,
            escalate_to=escalate_to,
        )

    output = step._wait(StepKind.SIGNAL, "wait_for_approval", name, timeout, {"approval": name}, approval=opens)
    if output is None:
        return None
    data = output["data"]
    # Decisions journaled before sign-offs existed name no approvers: the one decider, if they approved.
    approvers = data.get("approvers", [data["by"]] if data["approved"] else [])
    return ApprovalDecision(bool(data["approved"]), data["by"], _at(data), data["comment"], tuple(approvers))


def wait_for_input(
    step: StepApi,
    name: str,
    form: type[forms.BaseForm] | str,
    assignees: str | Iterable[str],
    initial: dict[str, Any] | None,
    details: str,
    timeout: Duration,
    timers: TaskTimers,
) -> TaskSubmission | None:
    """``ctx.wait_for_input``'s work (see :meth:`WorkflowContext.wait_for_input`).

    The form is imported, and ``initial`` and ``due`` are read, only when the
    task opens: a replay past it needs neither (the form may be gone by then).
    """
    _checked(name, details, "task")
    parsed = parse_assignees(assignees)
    remind, escalate, escalate_to = timers.check(f"task {name!r}")
    if initial is not None and not isinstance(initial, dict):
        raise StepUsageError(f"initial must be a dict of the form's initial values, got {type(initial).__name__}")

    def opens(now: datetime, timeout_at: datetime) -> NewApproval:
        path, fields = opening_form(form)
        values = None if initial is None else json_safe(initial, f"initial of task {name!r}", "initial")
        return NewApproval(
            name,
            details,
            parsed,
            timeout_at,
            path,
            fields,
            values,
            timers.due_at(f"task {name!r}", now, timeout_at),
            remind_every=remind,
            escalate_at=None if escalate is None else now + escalate,
            escalate_to=escalate_to,
        )

    context = {"approval": name, "form": form_path(form)}
    output = step._wait(StepKind.SIGNAL, "wait_for_input", name, timeout, context, approval=opens)
    if output is None:
        return None
    data = output["data"]
    return TaskSubmission(data["data"], data["by"], _at(data))
