"""List actions with "select all": every run the list's filter and search match, by chunks (admin/actions.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_openworkflow.client import operations
from django_openworkflow.conf import owf_settings
from django_openworkflow.models import WorkflowRun
from tests.admin.helpers import LIST_URL, make_run, messages_of
from tests.admin.test_i18n import localized  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


def _failed(count: int, **fields: Any) -> list[WorkflowRun]:
    return [
        make_run(status="failed", error={"type": "ValueError", "message": "kaboom"}, **fields) for _ in range(count)
    ]


def _across(action: str, **extra: Any) -> dict[str, Any]:
    one = WorkflowRun.objects.values_list("id", flat=True).first()
    return {"action": f"{action}_runs", "_selected_action": [str(one)], "select_across": "1", **extra}


def test_the_confirmation_counts_every_matching_run_and_lists_the_newest(admin_client: Any) -> None:
    _failed(130)
    for _ in range(3):
        make_run(status="completed")
    make_run(workflow_name="sleeper", status="failed")  # outside the filter
    page = admin_client.post(LIST_URL + "?workflow=three-steps", _across("retry_failed", index="0"))
    html = page.content.decode()
    assert "Retry all 133 runs matching the filter from the failed step?" in html
    assert "Will change: 130 runs." in html
    assert "<li><strong>3 runs</strong>: it has not failed (it is completed)</li>" in html
    assert "… and 113 more." in html
    assert html.count('name="_selected_action"') == 1
    assert 'name="owf_count" value="133"' in html
    assert WorkflowRun.objects.filter(status="failed").count() == 131  # nothing done yet


def test_the_confirmation_costs_the_same_for_many_runs(admin_client: Any) -> None:
    def queries_to_confirm(count: int) -> int:
        WorkflowRun.objects.all().delete()
        _failed(count)
        with CaptureQueriesContext(connections[owf_settings.database]) as captured:
            response = admin_client.post(LIST_URL, _across("retry_now", index="0"))
        assert f"all {count} runs matching the filter" in response.content.decode()
        return len(captured)

    queries_to_confirm(2)  # caches warmed
    assert queries_to_confirm(250) == queries_to_confirm(3)


def test_the_action_applies_to_the_whole_filter_by_chunks_and_logs_each_run(
    admin_client: Any, monkeypatch: Any
) -> None:
    monkeypatch.setattr(operations, "CHUNK", 7)
    failed = _failed(60)
    make_run(status="completed")
    outside = _failed(2, workflow_name="sleeper")
    done = admin_client.post(
        LIST_URL + "?workflow=three-steps", _across("retry_failed", post="yes", owf_count="61"), follow=True
    )
    assert messages_of(done) == [
        "Sent back to pending: 60 runs.",
        "Retry from failed step: skipped 1 run: it has not failed (it is completed).",
    ]
    assert WorkflowRun.objects.filter(id__in=[run.id for run in failed], status="pending").count() == 60
    assert all(WorkflowRun.objects.get(id=run.id).status == "failed" for run in outside)
    assert LogEntry.objects.filter(change_message__startswith="Retry from failed step").count() == 60


def test_the_search_narrows_select_all_too(admin_client: Any) -> None:
    _failed(3)
    others = [make_run(status="failed", error={"type": "KeyError", "message": "other"}) for _ in range(2)]
    done = admin_client.post(LIST_URL + "?q=kaboom", _across("cancel", post="yes", owf_count="3"), follow=True)
    assert messages_of(done) == ["Cancel: skipped 3 runs: it has already finished (failed)."]
    rerun = admin_client.post(LIST_URL + "?q=kaboom", _across("rerun", post="yes", owf_count="3"), follow=True)
    (message,) = messages_of(rerun)
    assert message.startswith("Started a new run for: 3 runs.")
    assert len(re.findall(r'<a href="[^"]+">[0-9a-f]{8}</a>', message)) == 3
    assert WorkflowRun.objects.filter(status="pending").count() == 3
    assert all(WorkflowRun.objects.get(id=run.id).status == "failed" for run in others)


def test_a_filter_that_grew_since_the_confirmation_is_not_acted_on(admin_client: Any) -> None:
    runs = [make_run() for _ in range(4)]
    response = admin_client.post(LIST_URL, _across("cancel", post="yes", owf_count="3"))
    assert response.status_code == 200
    assert messages_of(response) == [
        "The filter now matches 4 runs, more than the 3 you confirmed: nothing was done. Look at the list again."
    ]
    html = response.content.decode()
    assert "Cancel all 4 runs matching the filter?" in html and 'name="owf_count" value="4"' in html
    assert all(WorkflowRun.objects.get(id=run.id).status == "pending" for run in runs)


def test_without_select_all_every_selected_run_is_carried_to_the_confirmation(admin_client: Any) -> None:
    runs = [make_run() for _ in range(120)]  # more than the page lists by name
    ids = [str(run.id) for run in runs]
    page = admin_client.post(LIST_URL, {"action": "cancel_runs", "_selected_action": ids, "index": "0"})
    html = page.content.decode()
    assert "… and 20 more." in html
    carried = re.findall(r'name="_selected_action" value="([^"]+)"', html)
    assert sorted(carried) == sorted(ids)
    done = admin_client.post(
        LIST_URL, {"action": "cancel_runs", "_selected_action": carried, "post": "yes"}, follow=True
    )
    assert "Canceled: 120 runs." in messages_of(done)


def test_select_all_in_french(admin_client: Any, localized: None) -> None:  # noqa: F811
    _failed(3)
    make_run(status="completed")
    page = admin_client.post(LIST_URL, _across("retry_failed", index="0"), HTTP_ACCEPT_LANGUAGE="fr")
    html = page.content.decode()
    assert "les 4 exécutions correspondant au filtre" in html
    assert "Seront modifiées : 3 exécutions." in html and "Seront ignorées :" in html
    assert "Compté à l’instant" in html
    grew = admin_client.post(LIST_URL, _across("cancel", post="yes", owf_count="1"), HTTP_ACCEPT_LANGUAGE="fr")
    assert messages_of(grew) == [
        "Le filtre correspond maintenant à 4 exécutions, plus que les 1 confirmées : rien n’a été fait."
        " Regardez la liste à nouveau."
    ]
