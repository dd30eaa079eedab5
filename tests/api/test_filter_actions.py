"""POST runs/actions/{cancel,retry,retry-now,rerun}: every run a filter matches (api/filter_actions.py)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from django_openworkflow.client import operations
from django_openworkflow.models import ApiToken, WorkflowRun
from tests.admin.helpers import make_run
from tests.api.test_views import API, JSON, error_of, make_user, post, written

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(django_user_model: Any) -> Any:
    """A client logged in as a staff user holding the given permissions ("view", "add", "change")."""

    def login(*actions: str) -> Client:
        client = Client()
        client.force_login(make_user(django_user_model, *actions, name=f"staff-{uuid.uuid4().hex[:8]}"))
        return client

    return login


def _failed(count: int, **fields: Any) -> list[WorkflowRun]:
    return [make_run(status="failed", error={"type": "E", "message": "x"}, **fields) for _ in range(count)]


def test_a_preview_counts_and_does_nothing(api: Any) -> None:
    _failed(3)
    make_run(status="completed")
    make_run(workflow_name="sleeper", status="failed")
    answer = post(api("change"), "/runs/actions/retry", {"workflow": "three-steps", "status": ["failed", "completed"]})
    assert answer.status_code == 200
    assert answer.json() == {
        "action": "retry",
        "done": False,
        "count": 4,
        "changed": 3,
        "refused": 1,
        "reasons": [{"reason": "it has not failed (it is completed)", "count": 1}],
        "created": [],
    }
    assert WorkflowRun.objects.filter(status="failed").count() == 4


def test_the_action_applies_to_every_matching_run_by_chunks(api: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(operations, "CHUNK", 4)
    runs = _failed(11)
    make_run(status="completed")
    other = _failed(1, workflow_name="sleeper")[0]
    client = api("change")
    body = {"workflow": "three-steps", "status": "failed,completed"}
    count = post(client, "/runs/actions/retry", body).json()["count"]
    answer = post(client, "/runs/actions/retry", {**body, "confirm_count": count})
    assert answer.status_code == 200
    data = answer.json()
    assert (data["done"], data["count"], data["changed"], data["refused"]) == (True, 12, 11, 1)
    assert WorkflowRun.objects.filter(id__in=[run.id for run in runs], status="pending").count() == 11
    other.refresh_from_db()
    assert other.status == "failed"


def test_a_filter_that_grew_is_refused_with_nothing_done(api: Any) -> None:
    make_run()
    client = api("change")
    count = post(client, "/runs/actions/cancel", {}).json()["count"]
    make_run()  # a run started meanwhile
    answer = post(client, "/runs/actions/cancel", {"confirm_count": count})
    assert answer.status_code == 409
    assert error_of(answer) == {
        "code": "count_changed",
        "message": "the filter matches 2 runs now, more than the 1 confirmed; look at the count again and confirm it",
        "field": "confirm_count",
    }
    assert not WorkflowRun.objects.filter(status="canceled").exists()


def test_rerun_needs_add_and_says_which_runs_it_started(api: Any) -> None:
    old = make_run(workflow_name="versioned", version="v1", status="completed")
    make_run(workflow_name="gone", status="failed")
    assert post(api("change"), "/runs/actions/rerun", {"confirm_count": 2}).status_code == 403
    answer = post(api("add"), "/runs/actions/rerun", {"confirm_count": 2}).json()
    assert (answer["changed"], answer["refused"]) == (1, 1)
    assert answer["reasons"] == [{"reason": "this process has no workflow 'gone' version None to start", "count": 1}]
    (new,) = WorkflowRun.objects.exclude(id=old.id).filter(workflow_name="versioned")
    assert answer["created"] == [str(new.id)]


@pytest.mark.parametrize("name", ["cancel", "retry", "retry-now"])
def test_the_other_actions_need_change(api: Any, name: str) -> None:
    make_run()
    assert post(api("view", "add"), f"/runs/actions/{name}", {"confirm_count": 1}).status_code == 403
    assert post(api("change"), f"/runs/actions/{name}", {}).status_code == 200
    assert Client().post(f"{API}/runs/actions/{name}", "{}", content_type=JSON).status_code == 401


def test_a_token_acts_without_a_session_or_csrf(django_user_model: Any) -> None:
    make_run(available_at=timezone.now() + timedelta(hours=1))
    _, token = ApiToken.objects.create_token(make_user(django_user_model, "change"), "t")
    client = Client(enforce_csrf_checks=True)
    answer = post(client, "/runs/actions/retry-now", {"confirm_count": 1}, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200 and answer.json()["changed"] == 1


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"status": "exploded"}, "status", "invalid"),
        ({"status": [1]}, "status", "invalid"),
        ({"workflow": ""}, "workflow", "invalid"),
        ({"queue": "no spaces"}, "queue", "invalid"),
        ({"created_after": "yesterday"}, "created_after", "invalid"),
        ({"created_before": "0999-12-31T00:00:00Z"}, "created_before", "invalid"),  # the pattern states the years
        ({"created_before": "1000-01-01T00:00:00+01:00"}, "created_before", "out_of_range"),  # 999 in UTC
        ({"input": [1]}, "input", "invalid"),
        ({"input": {"a": {"$gt": 1}, 'k"': 1}}, "input", "bad_payload"),
        ({"confirm_count": -1}, "confirm_count", "invalid"),
        ({"confirm_count": "3"}, "confirm_count", "invalid"),
        ({"confirm_count": True}, "confirm_count", "invalid"),
        ({"limit": 3}, "limit", "unknown_field"),
    ],
)
def test_a_bad_filter_is_a_400_naming_the_field(api: Any, body: dict[str, Any], field: str, code: str) -> None:
    make_run()
    before = written()
    answer = post(api("change"), "/runs/actions/cancel", {**body, "confirm_count": body.get("confirm_count", 1)})
    assert answer.status_code == 400
    error = error_of(answer)
    assert (error["field"], error["code"]) == (field, code), error
    assert written() == before and not WorkflowRun.objects.filter(status="canceled").exists()


def test_the_routes_do_not_take_actions_for_a_run_id(api: Any) -> None:
    answer = api("view").get(f"{API}/runs/actions")
    assert answer.status_code == 404 and error_of(answer)["code"] == "not_found"
    assert post(api("change"), "/runs/actions/explode", {}).status_code == 404
