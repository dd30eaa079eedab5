"""``GET schedules``, ``POST schedules/<name>/trigger`` and ``.../backfill``: answers, permissions, CSRF, bad input."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import ApiToken, WorkflowRun
from django_openworkflow.worker.schedules import sync_schedules
from tests.fixtures import schedule_workflows
from tests.fixtures.schedule_workflows import EVERY_MINUTE, PARIS

pytestmark = pytest.mark.django_db

API = "/workflows/api"
RANGE = {"start": "2026-01-10T00:00:00", "end": "2026-01-12T00:00:00+01:00"}


@pytest.fixture
def scheduled() -> Iterator[list[Any]]:
    specs = schedule_workflows.declare()
    yield specs
    for spec in specs:
        registry.unregister(spec.name, spec.version)


def _client(django_user_model: Any, *codenames: str) -> Client:
    user = django_user_model.objects.create_user("ops", password="pw")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    _, token = ApiToken.objects.create_token(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


def _post(client: Client, url: str, body: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def test_schedules_are_listed_with_the_view_permission(scheduled, django_user_model):
    sync_schedules()
    client = _client(django_user_model, "view_workflowrun")
    listed = {item["name"]: item for item in client.get(f"{API}/schedules").json()["schedules"]}
    assert listed[PARIS]["overlap"] == "allow_all" and listed[PARIS]["timezone"] == "Europe/Paris"
    assert client.get(f"{API}/schedules?x=1").json()["error"]["code"] == "unknown_parameter"
    # Viewing is not starting runs.
    assert client.post(f"{API}/schedules/{PARIS}/trigger").status_code == 403
    assert _post(client, f"{API}/schedules/{PARIS}/backfill", RANGE).status_code == 403
    assert not WorkflowRun.objects.exists()


def test_trigger_and_backfill_with_a_token(scheduled, django_user_model):
    client = _client(django_user_model, "add_workflowrun")
    answer = client.post(f"{API}/schedules/{EVERY_MINUTE}/trigger")
    assert answer.status_code == 201
    run = WorkflowRun.objects.get(workflow_name=EVERY_MINUTE)
    assert answer.json()["run"]["id"] == str(run.id) and run.idempotency_key.startswith("schedule:now:")
    first = _post(client, f"{API}/schedules/{PARIS}/backfill", RANGE)
    assert first.status_code == 201
    # The start without an offset is in Paris; the end has one: 2026-01-11T23:00Z, after the second tick.
    assert {key: first.json()[key] for key in ("ticks", "created", "first_tick", "last_tick")} == {
        "ticks": 2, "created": 2, "first_tick": "2026-01-10T01:00:00+00:00", "last_tick": "2026-01-11T01:00:00+00:00"
    }  # fmt: skip
    again = _post(client, f"{API}/schedules/{PARIS}/backfill", RANGE)
    assert again.status_code == 200 and again.json()["created"] == 0 and again.json()["runs"] == first.json()["runs"]


@pytest.mark.parametrize(
    ("name", "body", "status", "code", "field"),
    [
        ("nope", RANGE, 404, "not_found", None),
        (PARIS, {"start": "2026-01-10T00:00:00"}, 400, "missing_field", "end"),
        (PARIS, {**RANGE, "overlap": "skip"}, 400, "unknown_field", "overlap"),
        (PARIS, {**RANGE, "start": 42}, 400, "invalid", "start"),
        (PARIS, {**RANGE, "start": "soon"}, 400, "invalid", "start"),
        # Read by fromisoformat, which takes week dates and digits without dashes: not the document's shape.
        (PARIS, {**RANGE, "start": "2026-W02-1"}, 400, "invalid", "start"),
        (PARIS, {**RANGE, "end": "20260201T000000"}, 400, "invalid", "end"),
        (PARIS, {**RANGE, "end": RANGE["start"]}, 400, "invalid", "end"),
        (EVERY_MINUTE, {"start": "2000-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, 400, "invalid", "end"),
    ],
)
def test_a_bad_backfill_is_refused_and_starts_nothing(scheduled, django_user_model, name, body, status, code, field):
    answer = _post(_client(django_user_model, "add_workflowrun"), f"{API}/schedules/{name}/backfill", body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert (error["code"], error.get("field")) == (code, field)
    assert not WorkflowRun.objects.exists()


def test_a_session_needs_the_csrf_token(scheduled, django_user_model):
    django_user_model.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="root", password="pw")
    assert client.post(f"{API}/schedules/{PARIS}/trigger").json()["error"]["code"] == "csrf_failed"
    assert not WorkflowRun.objects.exists()
