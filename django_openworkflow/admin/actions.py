"""The run actions the list and the run page offer, on :mod:`django_openworkflow.client.operations`.

Cancel, retry now, retry from the failed step and re-run: each is one bulk
operation that refuses runs in the wrong state with a reason, which the
confirmation page shows before and the messages report after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.functional import Promise
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from ..client import matching, operations
from ..client.reruns import copied_attempts, from_step_refusal
from ..errors import OperationRefused, RunNotFound
from ..formatting import compact_json, kind_label, runs_text, short_id
from ..models import StepKind, WorkflowRun
from ..store.queries import PAYLOAD_FIELDS
from ..store.reruns import source_journal
from .markup import run_url, status_badge

CONFIRM_LISTED = 100  # runs named on a list action's confirmation page; the rest are counted
ACROSS_LISTED = 20  # with "select all": the newest runs of the filter, as a sample (the counts say the rest)


@dataclass(frozen=True)
class RunAction:
    """A run operation offered on the run list and the run page (see ``client/operations.py``)."""

    name: str
    operation: str  # the name in operations.REFUSALS
    label: str | Promise
    permission: str  # the model permission it needs: "change" or "add"
    question: str | Promise  # the confirmation, "…%(runs)s?": "the 3 selected runs" or "this run"
    done: str | Promise  # past tense for the report: "Canceled"
    apply: Callable[[Iterable[Any]], operations.BulkResult]
    creates_runs: bool = False

    def refusals(self, runs: Iterable[WorkflowRun]) -> dict[Any, str]:
        """Why the action would skip each of ``runs`` (the runs it would change are absent)."""
        return operations.refusals(self.operation, runs)

    def offered(self, run: WorkflowRun) -> bool:
        """Whether the run page offers it for ``run``."""
        return not self.refusals([run])

    def ask(self, runs: str) -> str:
        """The confirmation question about ``runs`` ("this run", "the 3 selected runs")."""
        return str(self.question) % {"runs": runs}

    @property
    def confirm(self) -> str:
        """The confirmation button's text: "Yes, cancel"."""
        return gettext("Yes, %(action)s") % {"action": str(self.label).lower()}


ACTIONS: dict[str, RunAction] = {
    action.name: action
    for action in (
        RunAction(
            "cancel",
            "cancel",
            _("Cancel"),
            "change",
            _("Cancel %(runs)s? A worker executing a run stops at its next step and writes nothing more."),
            _("Canceled"),
            operations.cancel_many,
        ),
        RunAction(
            "retry_now",
            "retry_now",
            _("Retry now"),
            "change",
            _("Make %(runs)s due now? A sleep ends early, a retry backoff or a scheduled start is skipped."),
            _("Made due now"),
            operations.retry_now_many,
        ),
        RunAction(
            "retry_failed",
            "retry_from_failed_step",
            _("Retry from failed step"),
            "change",
            _("Retry %(runs)s from the failed step? Completed steps keep their outputs and are not run again."),
            _("Sent back to pending"),
            operations.retry_from_failed_step_many,
        ),
        RunAction(
            "rerun",
            "rerun",
            _("Re-run with same input"),
            "add",
            _("Start a new run of the same workflow and version with the same input as %(runs)s?"),
            _("Started a new run for"),
            operations.rerun_many,
            creates_runs=True,
        ),
    )
}


def confirmation(action: RunAction, queryset: QuerySet[WorkflowRun], across: bool = False) -> dict[str, Any]:
    """The confirmation page of a list action: the question and the runs, each with why it would be skipped.

    ``across``: every run the list's filter matches (the admin's "select
    all"): the count and the skipped runs by reason come from one aggregate
    query, and only the newest runs are listed.
    """
    if across:
        return _across_confirmation(action, queryset)
    # The list's queryset leaves the payloads out; a refusal may read the error.
    listed = list(queryset.defer(None).defer("input", "output")[:CONFIRM_LISTED])
    total = len(listed) if len(listed) < CONFIRM_LISTED else queryset.count()
    skipped = action.refusals(listed)
    return {
        "title": gettext("%(action)s: are you sure?") % {"action": action.label},
        "action": action,
        "action_function": f"{action.name}_runs",
        "question": action.ask(
            ngettext("the %(count)d selected run", "the %(count)d selected runs", total) % {"count": total}
        ),
        "runs": [(run, status_badge(run.status, run.worker_id), skipped.get(run.id, "")) for run in listed],
        "more": total - len(listed),
    }


def _across_confirmation(action: RunAction, queryset: QuerySet[WorkflowRun]) -> dict[str, Any]:
    seen = matching.preview(action.operation, queryset, sample=ACROSS_LISTED)
    matching_runs = ngettext(
        "the %(count)d run matching the filter", "all %(count)d runs matching the filter", seen.count
    ) % {"count": seen.count}
    return {
        "title": gettext("%(action)s: are you sure?") % {"action": action.label},
        "action": action,
        "action_function": f"{action.name}_runs",
        "question": action.ask(matching_runs),
        "runs": [
            (run, status_badge(run.status, run.worker_id), seen.sample_refusals.get(run.id, "")) for run in seen.sample
        ],
        "more": seen.count - len(seen.sample),
        "match_count": seen.count,
        "would_change": runs_text(seen.would_change),
        # The reasons come from operations.py, in English.
        "skipped_by_reason": [(runs_text(count), reason) for reason, count in seen.refused.items()],
        "chunk": operations.CHUNK,
    }


def perform_on_matching(
    request: HttpRequest,
    action: RunAction,
    queryset: QuerySet[WorkflowRun],
    confirm_count: int | None,
    log: Callable[[list[WorkflowRun]], None],
) -> bool:
    """Apply ``action`` to every run ``queryset`` matches, by chunks, and report counts; False if the filter grew.

    Each chunk is logged in the admin's history as it is done. When the
    filter matches more runs than ``confirm_count`` (the count the
    confirmation page showed), nothing is done and an error says so.
    """

    def done_chunk(result: operations.BulkResult) -> None:
        if result.changed:
            log(list(WorkflowRun.objects.defer(*PAYLOAD_FIELDS).filter(id__in=result.changed)))

    try:
        result = matching.apply_to_matching(
            action.operation, queryset, confirm_count=confirm_count, on_chunk=done_chunk
        )
    except matching.MatchCountChanged as exc:
        message = gettext(
            "The filter now matches %(count)d runs, more than the %(confirmed)d you confirmed: nothing was done."
            " Look at the list again."
        )
        messages.error(request, message % {"count": exc.count, "confirmed": exc.confirmed})
        return False
    if result.changed:
        report = gettext("%(done)s: %(runs)s.") % {"done": action.done, "runs": runs_text(result.changed)}
        if action.creates_runs:
            links = format_html_join(
                ", ", '<a href="{}">{}</a>', ((run_url(new), short_id(new)) for new in result.created)
            )
            more = "…" if result.changed > len(result.created) else ""
            # The links are HTML already; the report is escaped.
            messages.success(request, mark_safe(f"{escape(report)} {links}{more}"))  # built by escape and format_html
        else:
            messages.success(request, report)
    for reason, count in result.refused.most_common():
        # The reasons come from operations.py, in English.
        messages.warning(
            request,
            gettext("%(action)s: skipped %(runs)s: %(reason)s.")
            % {"action": action.label, "runs": runs_text(count), "reason": reason},
        )
    return True


def perform_action(
    request: HttpRequest,
    action: RunAction,
    run_ids: Iterable[Any],
    log: Callable[[list[WorkflowRun]], None],
) -> list[Any]:
    """Apply ``action`` to the runs in bulk, report what changed and what was skipped and why.

    ``log(runs)`` records the changes in the admin's history. Returns the
    ids of the runs changed (of the new runs, for an action that creates
    them). A fixed number of queries per chunk of runs, however many.
    """
    result = action.apply(run_ids)
    if result.changed:
        log(list(WorkflowRun.objects.defer(*PAYLOAD_FIELDS).filter(id__in=result.changed)))
    if result.changed:
        if action.creates_runs:
            links = format_html_join(
                ", ", '<a href="{}">{}</a>', ((run_url(new), short_id(new)) for new in result.created)
            )
            # The links are HTML already; the translated frame and the other parts are escaped.
            frame = escape(gettext("%(done)s %(runs)s: %(links)s."))
            parts = {"done": escape(action.done), "runs": escape(runs_text(len(result.changed))), "links": links}
            messages.success(request, mark_safe(frame % parts))  # every part is escaped or built by format_html
        else:
            report = gettext("%(done)s: %(runs)s.")
            messages.success(request, report % {"done": action.done, "runs": runs_text(len(result.changed))})
    for reason in sorted(set(result.refused.values())):
        skipped = [run_id for run_id, why in result.refused.items() if why == reason]
        ids = ", ".join(short_id(run_id) for run_id in skipped)
        # The reasons come from operations.py, in English.
        messages.warning(
            request,
            gettext("%(action)s: skipped %(runs)s (%(ids)s): %(reason)s.")
            % {"action": action.label, "runs": runs_text(len(skipped)), "ids": ids, "reason": reason},
        )
    return result.created if action.creates_runs else result.changed


# -- re-run from a step (the run page's journal offers it per step) --


def rerun_from_step_confirmation(run: WorkflowRun, step: str) -> dict[str, Any]:
    """The confirmation page of "re-run from here": what is copied, what runs again, or why it is refused."""
    journal = source_journal(run.id)
    refusal = operations.rerun_refusal(run) or from_step_refusal(journal, step)
    copied = [] if refusal else copied_attempts(journal, step)
    kept = {attempt.step_name for attempt in copied}
    again = [] if refusal else [key for key in dict.fromkeys(a.step_name for a in journal) if key not in kept]
    return {
        "title": gettext("Re-run from step %(step)s: are you sure?") % {"step": repr(step)},
        "run": run,
        "step": step,
        "refusal": refusal,
        # Each copied step: its name, its kind and its output as one line of JSON (a sleep has none to show).
        "copied": [
            (a.step_name, kind_label(a.kind), compact_json(a.output, 120) if a.kind != StepKind.SLEEP else "")
            for a in copied
        ],
        "again": again,
        "question": gettext(
            "Start a new run of %(workflow)s with the same input as run %(run)s, whose steps before %(step)s keep "
            "the results recorded in that run (they are copied, not run again)? %(step)s and every step after it "
            "run again."
        )
        % {"workflow": run.workflow_name, "run": short_id(run.id), "step": repr(step)},
    }


def perform_rerun_from_step(request: HttpRequest, run: WorkflowRun, step: str) -> Any:
    """Start the re-run from ``step``; the new run's id, or None (the reason is in the messages)."""
    try:
        new_id = operations.rerun_from_step(run.id, step)
    except (OperationRefused, RunNotFound) as exc:
        reason = exc.reason if isinstance(exc, OperationRefused) else str(exc)
        messages.error(request, gettext("Not re-run: %(reason)s.") % {"reason": reason})
        return None
    messages.success(
        request,
        format_html(
            gettext("Started run {} from step {}: the steps before it were copied from run {}."),
            format_html('<a href="{}">{}</a>', run_url(new_id), short_id(new_id)),
            repr(step),
            short_id(run.id),
        ),
    )
    return new_id
