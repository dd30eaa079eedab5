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
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.core.mail import mail_admins
from django.urls import NoReverseMatch, reverse

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
        mail_admins(f"Workflow {sender!r} failed: {what}"[:200], body, fail_silently=False)
    except Exception:  # a mail server down must not fail the run nor the worker
        logger.exception("could not mail the admins about failed run %s", run_id)


def connect() -> None:
    """Listen for failed runs (the app does it at start-up; the setting is read at each failure)."""
    hooks.run_finished.connect(_on_run_finished, dispatch_uid="django_openworkflow.alerts")
