"""The admin's entry point to ``forget``: ``workflowrun/forget/?subject=app_label.model:pk``.

Linked from the run list filtered by a subject and from an object's runs
section, for users with the permission ``forget`` asks of every front door
(``django_openworkflow.delete_workflowrun``). GET shows what would be
erased and the runs that have not finished; POST erases (canceling those
first when asked), records the user on each run and in Django's admin log,
and goes back to the subject's run list.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext

from ..client.erasure import PERMISSION, forget, runs_to_forget
from ..client.subjects import Subject, parse_subject
from ..errors import ForgetRefused, InvalidArgument
from ..models import WorkflowRun
from ..states import FINISHED_STATUSES
from .markup import subject_runs_url
from .responses import PrintableTemplateResponse

TEMPLATE = "django_openworkflow/forget.html"


def may_forget(request: HttpRequest) -> bool:
    """Whether the user may erase runs' payloads."""
    return bool(request.user.has_perm(PERMISSION))


def forget_url(subject: Subject) -> str:
    """The confirmation page of forgetting ``subject``."""
    return f"{reverse('admin:django_openworkflow_workflowrun_forget')}?{urlencode({'subject': str(subject)})}"


def forget_view(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """GET: what would be erased; POST: erase it. ``context`` is the admin's (site, opts, media)."""
    if not may_forget(request):
        raise PermissionDenied
    changelist = reverse("admin:django_openworkflow_workflowrun_changelist")
    try:
        subject = parse_subject(request.GET.get("subject", ""))
    except InvalidArgument as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(changelist)
    back = subject_runs_url(subject.type, subject.id)
    if request.method == "POST":
        try:
            user = cast(AbstractBaseUser, request.user)  # staff only: never anonymous here
            done = forget(str(subject), cancel_live=request.POST.get("cancel_live") == "on", by=user)
        except ForgetRefused as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(forget_url(subject))
        messages.success(
            request,
            gettext("%(subject)s: the payloads of %(erased)d runs erased (%(already)d erased before).")
            % {"subject": subject, "erased": len(done.erased), "already": len(done.already)},
        )
        return HttpResponseRedirect(back)
    run_ids = runs_to_forget(subject)
    runs = WorkflowRun.objects.filter(id__in=run_ids).only("id", "workflow_name", "status", "erased_at")
    live = [run for run in runs if run.status not in FINISHED_STATUSES]
    page = {
        **context,
        "title": gettext("Forget %(subject)s") % {"subject": subject},
        "subject": subject,
        "subject_runs_url": back,
        "total": len(run_ids),
        "erased_before": sum(1 for run in runs if run.erased_at is not None),
        "live": live,
    }
    return PrintableTemplateResponse(request, TEMPLATE, page)
