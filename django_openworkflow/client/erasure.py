"""Erasure by subject: :func:`forget` erases the payloads of an object's finished runs.

The runs linked to the object (``subject=obj``) and their child runs, at
any depth, are erased: a child runs on what its parent passed it. Each run
is erased in a transaction of its own (``store/erasure.py`` says what goes
and what stays). Runs that have not finished are refused before anything
is erased, or canceled first with ``cancel_live=True``.

Django's admin log is on the default database, not the workflow's: the
comments its entries of approval decisions quote (written with encryption
off) are taken out of them here, and, when ``forget`` is given a user, an
entry per erased run records the erasure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.contenttypes.models import ContentType
from django.db import models

from ..errors import ForgetRefused
from ..models import Approval, WorkflowRun
from ..states import FINISHED_STATUSES
from ..store import get_backend
from ..store.erasure import Outcome, erase_run, with_descendants
from . import operations
from .subjects import Subject, as_subject

PERMISSION = "django_openworkflow.delete_workflowrun"
"""What the admin, the HTTP API and the command line ask of the user who forgets: whoever may delete runs."""


@dataclass
class Forgotten:
    """What :func:`forget` did to a subject's runs (ids in the order they were erased)."""

    subject: Subject
    erased: list[Any] = field(default_factory=list)
    """The runs erased now."""
    already: list[Any] = field(default_factory=list)
    """The runs erased before (forgetting twice erases nothing more)."""
    canceled: list[Any] = field(default_factory=list)
    """With ``cancel_live``: the runs canceled before they were erased."""


def forget(obj: models.Model | str, *, cancel_live: bool = False, by: str | AbstractBaseUser = "") -> Forgotten:
    """Erase the payloads of every run linked to ``obj`` and of their child runs; keep the runs' shape.

    ``obj`` is a model instance or its ``"app_label.model:pk"`` text (for an
    object since deleted). Inputs, outputs, step results, errors' messages
    and tracebacks, signals' and delivered events' data, published values,
    stream chunks and approvals' details and comments are erased; the runs,
    their steps, statuses, times and attempt counts stay, so lists, the
    dashboard and metrics count them as before. ``by`` says who asked: a
    name, or a user (their username is stored on each run and shown on its
    admin page; Django's admin log records the erasure under them).

    Runs that have not finished are refused with
    :class:`~django_openworkflow.errors.ForgetRefused` naming them, and
    nothing is erased; with ``cancel_live=True`` they are canceled first.
    Forgetting again erases nothing more.
    """
    subject = as_subject(obj, "obj")
    run_ids = runs_to_forget(subject)
    result = Forgotten(subject)
    live = _live(run_ids)
    if live and not cancel_live:
        raise ForgetRefused(str(subject), live, "have not finished (cancel them, or pass cancel_live=True)")
    if live:
        result.canceled = operations.cancel_many(live).changed
        live = _live(live)
        if live:
            raise ForgetRefused(
                str(subject), live, "are being canceled: their compensations run; forget again once they have ended"
            )
    backend = get_backend()
    name = by if isinstance(by, str) else by.get_username()
    started_again = []
    for run_id in run_ids:
        outcome = erase_run(backend, run_id, name)
        if outcome is Outcome.ERASED:
            result.erased.append(run_id)
        elif outcome is Outcome.ALREADY:
            result.already.append(run_id)
        elif outcome is Outcome.LIVE:
            started_again.append(run_id)
    _erase_admin_log(result.erased, None if isinstance(by, str) else by)
    if started_again:
        raise ForgetRefused(
            str(subject),
            started_again,
            "were made due again while the others were erased; forget again once they have ended",
        )
    return result


def runs_to_forget(subject: Subject) -> list[Any]:
    """The ids of the runs linked to ``subject``, oldest first, then of their child runs at any depth."""
    linked = WorkflowRun.objects.filter(**subject.columns()).order_by("created_at", "id").values_list("id", flat=True)
    return with_descendants(linked)


LOG_SUFFIX = " (django-openworkflow)"
_COMMENTED = re.compile(r"( \(\d+ of \d+\))?: ")
"""After an approval's name in the admin log: a sign-off's count, then the comment."""


def _erase_admin_log(run_ids: list[Any], user: AbstractBaseUser | None) -> None:
    """Take approval comments out of the admin log's entries of these runs; log their erasure under ``user``."""
    if not run_ids:
        return
    entries = LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(WorkflowRun), object_id__in=[str(run_id) for run_id in run_ids]
    )
    # Written by client/approvals.py as "Approved 'name': comment (django-openworkflow)", a sign-off as
    # "Approved 'name' (1 of 2): comment (django-openworkflow)": the comment goes, the rest stays.
    names = set(Approval.objects.filter(workflow_run_id__in=run_ids).values_list("name", flat=True))
    heads = [f"{verb} {name!r}" for name in names for verb in ("Approved", "Rejected")]
    for entry in entries.filter(change_message__endswith=LOG_SUFFIX).only("id", "change_message"):
        for head in heads:
            message = entry.change_message
            if message.startswith(head) and (said := _COMMENTED.match(message, len(head))):
                entries.filter(id=entry.id).update(change_message=f"{head}{said.group(1) or ''}{LOG_SUFFIX}")
                break
    if user is not None:
        LogEntry.objects.log_actions(
            user_id=user.pk,
            queryset=list(WorkflowRun.objects.filter(id__in=run_ids).only("id", "workflow_name", "status")),
            action_flag=CHANGE,
            change_message="Erased its payloads (forget, django-openworkflow)",
        )


def _live(run_ids: list[Any]) -> list[Any]:
    """Those of ``run_ids`` that have not finished, in their order."""
    unfinished = set(
        WorkflowRun.objects.filter(id__in=run_ids).exclude(status__in=FINISHED_STATUSES).values_list("id", flat=True)
    )
    return [run_id for run_id in run_ids if run_id in unfinished]
