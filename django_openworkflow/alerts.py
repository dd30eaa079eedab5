"""Mail the site's admins when a run fails, at most once per workflow per period.

``OPENWORKFLOW["MAIL_ADMINS_ON_FAILURE"]`` (a duration such as ``"15m"``;
``None``, the default, sends nothing) turns it on. The receiver of the
``run_finished`` hook sends with Django's :func:`~django.core.mail.mail_admins`
(``ADMINS``, ``EMAIL_BACKEND``, ``SERVER_EMAIL``) in the process that ended
the run. The limit is kept in Django's default cache with ``cache.add``: with
a cache the workers share (Redis, Memcached, the database cache) it holds
across the fleet; with the per-process default (``LocMemCache``) it holds per
process. A mail that cannot be sent is logged, never raised: it cannot fail
a run.

When a run opens an approval (``ctx.wait_for_approval``),
``OPENWORKFLOW["APPROVAL_NOTIFY"]`` — a dotted path to a function called
with the ``approval_opened`` hook's keyword arguments, by default
:func:`mail_assignees` (Django's ``send_mail`` to the assignees with an
address, with a link to the Inbox); ``None`` sends nothing — tells them.
Its errors are logged, never raised. The same function is called, with
``reason`` ``"reminder"`` or ``"escalation"``, when a task's timer fires
(the ``task_timer_fired`` hook, from the workers' task-timer sweep).
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.core.mail import get_connection, mail_admins, send_mail
from django.urls import NoReverseMatch, reverse
from django.utils.module_loading import import_string

from . import hooks
from .conf import owf_settings
from .durations import parse_duration
from .models import WorkflowRun

logger = logging.getLogger("django_openworkflow.alerts")

SETTING = "MAIL_ADMINS_ON_FAILURE"


def mail_period() -> timedelta | None:
    """The setting as a positive period, or None when it is off; ``ValueError`` names a bad value."""
    value = owf_settings.raw(SETTING)
    if value is None or value is False:
        return None
    period = parse_duration("15m" if value is True else value)
    if period.total_seconds() <= 0:
        raise ValueError(f"OPENWORKFLOW[{SETTING!r}] must be a positive duration or None, got {value!r:.60}")
    return period


def run_link(run_id: Any) -> str:
    """The run's admin page: absolute with ``OPENWORKFLOW["SITE_URL"]``, else the path ("" without the admin)."""
    try:
        path = reverse("admin:django_openworkflow_workflowrun_change", args=[run_id])
    except NoReverseMatch:
        return ""
    site = owf_settings.raw("SITE_URL") or ""
    return f"{site.rstrip('/')}{path}"


def _on_run_finished(sender: str, *, run_id: Any, status: str, error: Any = None, **kwargs: Any) -> None:
    if status != "failed":
        return
    try:
        period = mail_period()
    except ValueError as exc:  # the system check reports it too
        logger.error("%s; no mail sent for run %s", exc, run_id)
        return
    if period is None:
        return
    # cache.add is atomic on every shared backend: the first failure of the period sends, the rest do not.
    key = "openworkflow:mailed-failure:" + hashlib.sha256(sender.encode()).hexdigest()[:32]
    if not cache.add(key, str(run_id), timeout=period.total_seconds()):
        return
    # The hook carries the message only: the stored error also says its type and step (read when mailing).
    stored = WorkflowRun.objects.filter(id=run_id).values_list("error", flat=True).first()
    error = stored if isinstance(stored, dict) else {"message": str(error or "")}
    what = f"{error.get('type') or 'Error'}: {error.get('message') or ''}".strip()
    step = f"\nStep: {error['step']}" if error.get("step") else ""
    link = run_link(run_id)
    body = (
        f"Run {run_id} of workflow {sender!r} failed.\n\n{what}{step}\n"
        + (f"\n{link}\n" if link else "")
        + f"\nAt most one mail per workflow every {period}: later failures of {sender!r} in that time are not mailed."
        " The admin's run list, filtered by status, shows them all.\n"
    )
    try:
        mail_admins(f"Workflow {sender!r} failed: {what}"[:200], body, fail_silently=False, connection=connection())
    except Exception:  # a mail server down must not fail the run nor the worker
        logger.exception("could not mail the admins about failed run %s", run_id)


# -- approvals: tell the assignees when one opens ------------------------------------------

APPROVAL_SETTING = "APPROVAL_NOTIFY"


def inbox_link() -> str:
    """The admin's Inbox: absolute with ``OPENWORKFLOW["SITE_URL"]``, else the path ("" without the admin)."""
    try:
        path = reverse("admin:django_openworkflow_approval_changelist")
    except NoReverseMatch:
        return ""
    site = owf_settings.raw("SITE_URL") or ""
    return f"{site.rstrip('/')}{path}"


def assignee_emails(assignees: dict[str, list[str]]) -> list[str]:
    """The addresses of the active users among ``assignees`` (named, in a group, holding a permission)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.db.models import Q

    user_model = get_user_model()
    users = assignees.get("users", [])
    match = Q(**{f"{user_model.USERNAME_FIELD}__in": users})
    if assignees.get("groups"):
        match |= Q(groups__name__in=assignees["groups"])
    for name in assignees.get("permissions", []):
        app_label, _, codename = name.partition(".")
        granted = Permission.objects.filter(content_type__app_label=app_label, codename=codename)
        match |= Q(user_permissions__in=granted) | Q(groups__permissions__in=granted)
    found = user_model._default_manager.filter(match, is_active=True).exclude(email="")
    return sorted({str(email) for email in found.values_list("email", flat=True) if email})


def mail_assignees(
    *,
    run_id: Any,
    workflow_name: str,
    name: str,
    details: str,
    assignees: Any,
    form: str = "",
    reason: str = "",
    **kwargs: Any,
) -> None:
    """The default ``APPROVAL_NOTIFY``: mail the assignees with an address a link to the Inbox (``send_mail``).

    ``reason`` is "" when the approval opens, ``"reminder"`` or ``"escalation"`` from its timers.
    """
    recipients = assignee_emails(assignees)
    if not recipients:
        return
    link = inbox_link()
    if form:  # a task that asks for a form (ctx.wait_for_input)
        wants, subject, where = "your input", "Input needed", "Fill it in"
    else:
        wants, subject, where = "your approval", "Approval needed", "Decide"
    body = (
        f"Run {run_id} of workflow {workflow_name!r} waits for {wants}: {name}.\n"
        + (f"\n{details}\n" if details else "")
        + (f"\n{where} in the inbox: {link}\n" if link else "")
    )
    if reason == "reminder":
        subject = f"Reminder: {subject.lower()}"
    elif reason == "escalation":
        subject = f"Escalated to you: {subject.lower()}"
    send_mail(f"{subject}: {name}"[:200], body, None, recipients, fail_silently=False, connection=connection())


MAIL_TIMEOUT = 30.0
"""Seconds a mail server may take to answer when ``EMAIL_TIMEOUT`` sets none (Django's default)."""


def connection() -> Any:
    """The mail connection: these mails are sent from a worker's slice, so a server that hangs gives up.

    Django's SMTP backend waits for ever unless ``EMAIL_TIMEOUT`` is set: then
    :data:`MAIL_TIMEOUT` is used, and the error is logged like any other.
    """
    from django.conf import settings

    if getattr(settings, "EMAIL_TIMEOUT", None) is None:
        return get_connection(timeout=MAIL_TIMEOUT)
    return get_connection()


def approval_notify_problem() -> str | None:
    """Why ``APPROVAL_NOTIFY`` cannot be called (the system check openworkflow.E008), or None."""
    notify = owf_settings.raw(APPROVAL_SETTING)
    if notify is None or notify is False:
        return None
    try:
        hook = import_string(notify) if isinstance(notify, str) else None
    except ImportError as exc:
        return f"{notify!r:.120} does not import: {exc}"
    if not callable(hook):
        return f"{notify!r:.120} is not a dotted path to a function; give one such as 'myproject.approvals.notify'"
    return None


def _on_approval_opened(sender: str, **kwargs: Any) -> None:
    notify = owf_settings.raw(APPROVAL_SETTING)
    if not notify:
        return
    try:
        import_string(notify)(**kwargs)
    except Exception:  # a mail server down, a broken hook: never the run's failure
        logger.exception(
            "the approval notification (OPENWORKFLOW[%r]) failed for run %s", APPROVAL_SETTING, kwargs.get("run_id")
        )


def connect() -> None:
    """Listen for failed runs and opened approvals (the app does it at start-up; settings are read each time)."""
    hooks.run_finished.connect(_on_run_finished, dispatch_uid="django_openworkflow.alerts")
    hooks.approval_opened.connect(_on_approval_opened, dispatch_uid="django_openworkflow.alerts.approvals")
    hooks.task_timer_fired.connect(_on_approval_opened, dispatch_uid="django_openworkflow.alerts.task_timers")
