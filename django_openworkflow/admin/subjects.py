"""An object's workflow runs on its own admin page: :class:`WorkflowRunsMixin` for the project's ModelAdmins.

Runs link to their subject by two plain columns, not a foreign key, so a
Django inline cannot list them; the mixin adds a section below the change
form instead, drawn like a tabular inline: the object's newest runs with
their status, error, times, a link to each run's page (where its actions
are) and one to the run list filtered to the object (for bulk actions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import Model
from django.http import HttpRequest
from django.template.loader import select_template
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.html import format_html

from .. import formatting as fmt
from ..client.subjects import subject_of
from ..errors import InvalidArgument
from ..models import WorkflowRun
from ..states import DisplayStatus
from ..store import queries, run_states
from .actions import ACTIONS
from .erasure import forget_url, may_forget
from .markup import badge, run_url, subject_runs_url, workflow_link

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

    _Base = ModelAdmin[Any]
else:
    _Base = object

TEMPLATE = "django_openworkflow/subject_change_form.html"
"""The change form with the runs section, extending the one the ModelAdmin would use otherwise."""


class WorkflowRunsMixin(_Base):
    """Put an object's workflow runs on its admin change page.

    ::

        @admin.register(Order)
        class OrderAdmin(WorkflowRunsMixin, admin.ModelAdmin):
            workflow_runs_limit = 20  # the newest runs shown; a link lists them all

    Only users who may view workflow runs see the section; the actions a run
    offers (cancel, retry, re-run) link to its page, offered as there to
    users allowed to take them. With a ``change_form_template`` of your own,
    include ``django_openworkflow/subject_runs.html`` where the section goes.
    """

    workflow_runs_limit: int = 20
    """The most runs the section lists, newest first; a link leads to the run list of all of them."""

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        if change and isinstance(obj, Model) and not obj._state.adding and _may_view_runs(request):
            context["owf_subject_runs"] = runs_section(request, obj, self.workflow_runs_limit)
        response = super().render_change_form(request, context, add, change, form_url, obj)
        if (
            "owf_subject_runs" in context
            and self.change_form_template is None
            and isinstance(response, TemplateResponse)
            and isinstance(names := response.template_name, list)
        ):
            # The template Django would pick (the model's, the app's, or the admin's), with the section added.
            base = select_template(names)
            response.context_data = {**(response.context_data or {}), "owf_base_template": base.template}
            response.template_name = TEMPLATE
        return response


def _may_view_runs(request: HttpRequest) -> bool:
    opts = WorkflowRun._meta
    user = request.user
    return user.has_perm(f"{opts.app_label}.view_{opts.model_name}") or user.has_perm(
        f"{opts.app_label}.change_{opts.model_name}"
    )


def _may(request: HttpRequest, permission: str) -> bool:
    opts = WorkflowRun._meta
    return request.user.has_perm(f"{opts.app_label}.{permission}_{opts.model_name}")


def runs_section(request: HttpRequest, obj: Model, limit: int) -> dict[str, Any]:
    """The section's context: the newest ``limit`` runs of ``obj`` as table rows, and how many there are."""
    try:
        subject = subject_of(obj, "obj")
    except InvalidArgument:  # a key no run can hold (over 255 characters): no run belongs to it
        return {"subject": str(obj), "rows": [], "total": 0, "more": 0, "list_url": ""}
    linked = queries.runs().filter(**subject.columns())
    total = linked.count()
    # The input and output stay unread; the error is what the error column and the actions' refusals read.
    runs = list(run_states.with_error_summary(linked.defer("input", "output"))[:limit]) if total else []
    states = run_states.states_of(runs)
    # Why each action would skip each run: one batch per action, not a query per run and action.
    refused = {name: action.refusals(runs) for name, action in ACTIONS.items() if _may(request, action.permission)}
    now = timezone.now()
    rows = []
    for run in runs:
        state = states[run.id]
        headline, step = fmt.error_cell(state.error) if state.status in _WITH_ERROR else ("", "")
        rows.append(
            {
                "run": run,
                "url": run_url(run.id),
                "short_id": fmt.short_id(run.id),
                "workflow": workflow_link(run.workflow_name),
                "status": badge(state.status),
                "hint": fmt.state_hint(state.status, run, state.error, state.wait, now)
                if state.status in (DisplayStatus.RETRYING, DisplayStatus.WAITING)
                else "",
                "error": headline,
                "error_step": step,
                "created": format_html(
                    '<time datetime="{}" title="{}">{}</time>',
                    run.created_at.isoformat(),
                    fmt.format_time(run.created_at, precise=True),
                    fmt.compact_time(run.created_at, now),
                ),
                "duration": fmt.format_duration(fmt.elapsed(run.started_at, run.finished_at, now)) or "-",
                "actions": [
                    format_html('<a class="owf-subject-action" href="{}#owf-actions">{}…</a>', run_url(run.id), a.label)
                    for name, a in ACTIONS.items()
                    if name in refused and run.id not in refused[name]
                ],
            }
        )
    return {
        "subject": str(subject),
        "rows": rows,
        "total": total,
        "more": total - len(rows),
        "list_url": subject_runs_url(subject.type, subject.id),
        "forget_url": forget_url(subject) if total and may_forget(request) else "",
    }


_WITH_ERROR = (DisplayStatus.FAILED, DisplayStatus.RETRYING)
