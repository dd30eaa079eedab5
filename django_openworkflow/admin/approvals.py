"""The Inbox: the open approvals and tasks the current user may decide, with Approve and Reject, or a form.

Each row shows what is being approved (the approval's name and details),
the run's workflow, a summary of its input and a link to its page, and
when it times out; a form with a comment posts the decision, which
:func:`django_openworkflow.client.approvals.decide_approval` checks
(assignees, first decision wins), delivers and logs. A task that asks for
a form (``ctx.wait_for_input``) links to its own page, where the project's
form is rendered with its widgets; a submission the form refuses shows the
form again with its errors and delivers nothing
(:func:`django_openworkflow.client.human_tasks.submit_task`); a form with
file fields is posted as ``multipart/form-data`` and its files saved only
once it is valid. Any staff user may
open the inbox: it lists only what they may decide, and a decision by
someone else is refused with 403.

Who works on what: three views — *Mine* (claimed by the user, or naming
them and claimed by nobody else), *My groups'* (claimed by nobody, assigned
to one of their groups) and *All I may see* — each with its count, the
overdue first. A row says who holds it, with **Claim** and **Release**
buttons, and a **Reassign** field for users with the
``django_openworkflow.reassign_approval`` permission; a task someone else
holds shows no decision buttons (the close refuses it anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, ngettext

from .. import formatting as fmt
from ..client.approvals import SCOPES, approvals_for, decide_approval, inbox_counts, is_overdue
from ..client.human_tasks import claim_task, may_reassign_tasks, open_task, reassign_task, release_task, submit_task
from ..errors import (
    ApprovalClosed,
    ApprovalNotAssigned,
    ApprovalNotFound,
    InvalidArgument,
    TaskClaimed,
    TaskFormInvalid,
    TaskFormUnavailable,
    WrongTaskKind,
)
from ..models import Approval
from ..store import get_backend
from .markup import run_url, subject_link, workflow_url
from .workers import RUNS_VIEW

INBOX = "admin:django_openworkflow_approval_changelist"


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin):
    """The inbox page in place of a change list; approvals are written by runs and decided here."""

    class Media:
        css: ClassVar[dict[str, tuple[str, ...]]] = {"all": ("django_openworkflow/admin.css",)}

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_active and request.user.is_staff)  # the inbox filters per user

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "<int:approval_id>/decide/",
                self.admin_site.admin_view(self.decide_view),
                name="django_openworkflow_approval_decide",
            ),
            path(
                "<int:approval_id>/claim/",
                self.admin_site.admin_view(self.claim_view),
                name="django_openworkflow_approval_claim",
            ),
            path(
                "<int:approval_id>/submit/",
                self.admin_site.admin_view(self.submit_view),
                name="django_openworkflow_approval_submit",
            ),
            path("", self.admin_site.admin_view(self.changelist_view), name="django_openworkflow_approval_changelist"),
        ]
        return own

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        scope = request.GET.get("scope", "all")
        scope = scope if scope in SCOPES else "all"
        username = request.user.get_username()
        may_reassign = may_reassign_tasks(request.user)
        now = get_backend().now()
        rows = [
            {
                "approval": approval,
                "run_url": run_url(approval.workflow_run_id),
                "workflow_url": workflow_url(approval.workflow_run.workflow_name),
                "input": fmt.compact_json(approval.workflow_run.input, width=120),
                "timeout": fmt.format_time(approval.timeout_at),
                "opened": fmt.format_time(approval.created_at),
                "due": fmt.format_time(approval.due_at) if approval.due_at else "",
                "overdue": is_overdue(approval.due_at, now),
                "held_by_other": bool(approval.claimed_by) and approval.claimed_by != username,
                "can_claim": not approval.claimed_by and approval.required == 1,
                "can_release": bool(approval.claimed_by) and (approval.claimed_by == username or may_reassign),
                "approved_by": ", ".join(signoff["by"] for signoff in approval.signoffs),
                # The model instance the run belongs to, if any (a link to its admin page; not read).
                "subject": subject_link(approval.workflow_run.subject_type, approval.workflow_run.subject_id or "")
                if approval.workflow_run.subject_type
                else None,
            }
            for approval in approvals_for(request.user, scope=scope)
        ]
        counts = inbox_counts(request.user)
        labels = {"mine": gettext("Mine"), "groups": gettext("My groups' tasks"), "all": gettext("All I may see")}
        tabs = [{"scope": name, "label": labels[name], "count": counts[name]} for name in ("mine", "groups", "all")]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "media": self.media,
            "title": gettext("Inbox"),
            "rows": rows,
            "scope": scope,
            "tabs": tabs,
            "may_reassign": may_reassign,
            # The run links lead to pages that need the view permission on runs: plain ids without it.
            "can_view_runs": any(request.user.has_perm(name) for name in RUNS_VIEW),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "django_openworkflow/inbox.html", context)

    def decide_view(self, request: HttpRequest, approval_id: int) -> HttpResponse:
        """POST from an inbox row: approve or reject, with an optional comment."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        decision = request.POST.get("decision")
        if decision not in ("approve", "reject"):
            raise Http404("No such decision.")

        def decide() -> str:
            decided = decide_approval(
                approval_id, request.user, approved=decision == "approve", comment=request.POST.get("comment", "")
            )
            if decided["remaining"]:
                return ngettext(
                    "Approved: %(n)s more approval is needed before the run goes on.",
                    "Approved: %(n)s more approvals are needed before the run goes on.",
                    decided["remaining"],
                ) % {"n": decided["remaining"]}
            return gettext("Approved.") if decision == "approve" else gettext("Rejected.")

        self._act(request, decide)
        return HttpResponseRedirect(reverse(INBOX))

    def _act(self, request: HttpRequest, action: Callable[[], str]) -> None:
        """Decide, claim, release or reassign (``action``, which says what it did), told to the user either way."""
        try:
            said = action()
        except ApprovalNotAssigned:
            raise PermissionDenied from None
        except ApprovalNotFound:
            raise Http404("No such approval.") from None
        except ApprovalClosed as exc:
            self._closed(request, exc)
        except TaskClaimed as exc:
            self._claimed(request, exc)
        except (InvalidArgument, WrongTaskKind) as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, said)

    def submit_view(self, request: HttpRequest, approval_id: int) -> HttpResponse:
        """A task's page: its form (GET), then the submission (POST), shown again with its errors if refused."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        try:
            if request.method == "POST":
                submit_task(approval_id, request.user, request.POST, files=request.FILES)
                self.message_user(request, gettext("Submitted."))
                return HttpResponseRedirect(reverse(INBOX))
            _, form = open_task(approval_id, request.user)
        except ApprovalNotAssigned:
            raise PermissionDenied from None
        except ApprovalNotFound:
            raise Http404("No such task.") from None
        except ApprovalClosed as exc:
            self._closed(request, exc, task=True)
            return HttpResponseRedirect(reverse(INBOX))
        except TaskClaimed as exc:
            self._claimed(request, exc)
            return HttpResponseRedirect(reverse(INBOX))
        except WrongTaskKind as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse(INBOX))
        except TaskFormUnavailable as exc:
            return self._task_page(request, approval_id, None, str(exc))
        except TaskFormInvalid as exc:
            return self._task_page(request, approval_id, exc.form, "")
        return self._task_page(request, approval_id, form, "")

    def claim_view(self, request: HttpRequest, approval_id: int) -> HttpResponse:
        """POST from an inbox row: claim, release, or reassign (``to``: a username) the approval or task."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = request.POST.get("action")
        if action not in ("claim", "release", "reassign"):
            raise Http404("No such action.")
        to = request.POST.get("to", "").strip()

        def change() -> str:
            if action == "claim":
                claim_task(approval_id, request.user)
                return gettext("Claimed: until you release it, only you may decide it.")
            if action == "release":
                release_task(approval_id, request.user)
                return gettext("Released.")
            reassign_task(approval_id, request.user, to)
            return gettext("Reassigned to %(who)s.") % {"who": to}

        self._act(request, change)
        scope = request.POST.get("scope", "all")
        return HttpResponseRedirect(reverse(INBOX) + (f"?scope={scope}" if scope in SCOPES else ""))

    def _claimed(self, request: HttpRequest, exc: TaskClaimed) -> None:
        said = gettext("This task is held by %(who)s: only they may decide it, until they release it.")
        self.message_user(request, said % {"who": exc.claimed_by}, messages.ERROR)

    def _task_page(self, request: HttpRequest, approval_id: int, form: Any, problem: str) -> HttpResponse:
        """The task's page: what it is about, its run, and its form (with errors) or why it cannot be shown."""
        approval = Approval.objects.select_related("workflow_run").get(id=approval_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "media": self.media + (form.media if form is not None else forms.Media()),
            "title": approval.name,
            "approval": approval,
            "form": form,
            "problem": problem,
            "run_url": run_url(approval.workflow_run_id),
            "input": fmt.compact_json(approval.workflow_run.input, width=120),
            "timeout": fmt.format_time(approval.timeout_at),
            "due": fmt.format_time(approval.due_at) if approval.due_at else "",
            "can_view_runs": any(request.user.has_perm(name) for name in RUNS_VIEW),
        }
        return TemplateResponse(request, "django_openworkflow/task.html", context)

    def _closed(self, request: HttpRequest, exc: ApprovalClosed, task: bool = False) -> None:
        if exc.decided_by and task:
            said = gettext("This task was already submitted by %(who)s: the first submission counts.")
        elif exc.decided_by:
            said = gettext("This approval was already decided by %(who)s: the first decision counts.")
        elif task:
            said = gettext("This task can no longer be submitted: it timed out or its run has ended.")
        else:
            said = gettext("This approval can no longer be decided: it timed out or its run has ended.")
        self.message_user(request, said % {"who": exc.decided_by}, messages.ERROR)
