"""Driving human tasks from a test: ``decide`` an approval, ``submit_task`` a task's form, without the admin.

``claim_task``, ``release_task`` and ``reassign_task`` say who works on one, as the Inbox's buttons do.

Both find the run's open approval or task (by name, or the only one open
of its kind), then go through the front door the Inbox and the API use
(``client/approvals.py``, ``client/human_tasks.py``): the assignees are checked,
a task's form validates the data, and the first decision wins, so a test
sees what a person would. They work on the workflow database (after
``drain()`` brought the run to its wait) and on an in-memory backend
(``store=``, after its own ``drain(backend)``); the in-memory backend keeps
no admin log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ApprovalNotFound

if TYPE_CHECKING:
    from ..store.interface import ApprovalStore
    from ..store.records import ApprovalRecord


def decide(
    run: Any,
    *,
    approved: bool,
    by: Any,
    comment: str = "",
    name: str | None = None,
    store: ApprovalStore | None = None,
) -> dict[str, Any]:
    """Approve or reject ``run``'s open approval as ``by``; returns the decision delivered.

    ``run``: a run's handle or id. ``by``: a user, or the username of one
    (read from the user model); they must be an assignee, as in the Inbox.
    ``name``: the approval's (the first argument of
    ``ctx.wait_for_approval``), needed only when the run has several open.
    ``store``: an in-memory backend, for runs started on it. Raises the
    errors of :func:`~django_openworkflow.decide_approval`, and
    :class:`~django_openworkflow.errors.ApprovalNotFound` when the run has
    no such open approval (not drained to its wait yet?).
    """
    from ..client.approvals import decide_approval

    user = _user(by)
    found = _open(run, "decision", name, store)
    return decide_approval(found.id, user, approved=approved, comment=comment, store=store)


def submit_task(
    run: Any,
    data: Mapping[str, Any],
    *,
    by: Any,
    name: str | None = None,
    store: ApprovalStore | None = None,
) -> dict[str, Any]:
    """Submit ``run``'s open task with ``data`` (a dict of the form's fields, JSON values) as ``by``.

    A file field takes a file: a Django ``File``, such as
    ``SimpleUploadedFile("receipt.pdf", b"...", "application/pdf")``; it is
    saved to the task files' storage and the run receives a reference.
    Returns the submission delivered (``{"data", "by", "at"}``). The form
    validates ``data`` as it validates what the Inbox posts: a refusal
    raises :class:`~django_openworkflow.errors.TaskFormInvalid`, whose
    ``errors`` are the form's. ``run``, ``by``, ``name`` and ``store`` are
    :func:`decide`'s.
    """
    from ..client.human_tasks import submit_task as submit

    user = _user(by)
    found = _open(run, "input", name, store)
    return submit(found.id, user, data, store=store)


def claim_task(run: Any, *, by: Any, name: str | None = None, store: ApprovalStore | None = None) -> ApprovalRecord:
    """Claim ``run``'s open approval or task for ``by``; returns it as it is now (``claimed_by``, ``activity``).

    ``run``, ``by``, ``name`` and ``store`` are :func:`decide`'s; the errors
    are :func:`~django_openworkflow.claim_task`'s.
    """
    from ..client.human_tasks import claim_task as claim

    return claim(_open(run, None, name, store).id, _user(by), store=store)


def release_task(run: Any, *, by: Any, name: str | None = None, store: ApprovalStore | None = None) -> ApprovalRecord:
    """Release the claim on ``run``'s open approval or task, as ``by`` (its holder, or a user who may reassign)."""
    from ..client.human_tasks import release_task as release

    return release(_open(run, None, name, store).id, _user(by), store=store)


def reassign_task(
    run: Any, *, to: Any, by: Any, name: str | None = None, store: ApprovalStore | None = None
) -> ApprovalRecord:
    """Give ``run``'s open approval or task to ``to`` (a user or a username), as ``by`` (who may reassign)."""
    from ..client.human_tasks import reassign_task as reassign

    return reassign(_open(run, None, name, store).id, _user(by), to, store=store)


def _open(run: Any, kind: str | None, name: str | None, store: ApprovalStore | None) -> ApprovalRecord:
    """The run's open approval (``kind`` "decision"), task ("input") or either (None) called ``name``, or the one."""
    from ..store import get_backend

    run_id = getattr(run, "id", run)
    backend: ApprovalStore = store or get_backend()
    found = [
        record
        for record in backend.run_approvals(run_id)
        if record.status == "open" and kind in (None, record.kind) and (name is None or record.name == name)
    ]
    noun = {"decision": "approval", "input": "task"}.get(kind or "", "approval or task")
    if not found:
        named = f" named {name!r}" if name is not None else ""
        raise ApprovalNotFound(
            f"run {run_id} has no open {noun}{named}: a run opens it when it reaches the wait (drain() first?)"
        )
    if len(found) > 1:
        names = ", ".join(repr(record.name) for record in found)
        raise ApprovalNotFound(f"run {run_id} has several open {noun}s ({names}): say which with name=")
    return found[0]


def _user(by: Any) -> Any:
    """A user, or the user with that username."""
    if not isinstance(by, str):
        return by
    from django.contrib.auth import get_user_model

    model = get_user_model()
    try:
        return model._default_manager.get_by_natural_key(by)
    except model.DoesNotExist:
        raise ValueError(f"no user has the username {by!r}; create one, or pass a user") from None
