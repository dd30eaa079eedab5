"""``GET workers``, ``GET queues``, ``POST queues/<name>/pause|resume``: answers, permissions, CSRF, bad names."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from django_openworkflow.models import ApiToken, QueueState
from django_openworkflow.store import workers
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db

API = "/workflows/api"


def _user(django_user_model: Any, *codenames: str) -> Any:
    user = django_user_model.objects.create_user("ops", password="pw")
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _token_client(user: Any) -> Client:
    _, token = ApiToken.objects.create_token(user, "test")
    return Client(headers={"Authorization": f"Bearer {token}"})


def test_workers_and_queues_need_the_view_permission(django_user_model):
    assert Client().get(f"{API}/queues").status_code == 401
    user = _user(django_user_model)
    assert _token_client(user).get(f"{API}/workers").status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    client = _token_client(django_user_model.objects.get(pk=user.pk))
    workers.register("w1", host="h", pid=3, version="0", queues=["default"], slots=2, heartbeat=timedelta(seconds=5))
    three_steps.run({}, queue="emails")
    listed = client.get(f"{API}/workers").json()["workers"]
    assert [(w["worker_id"], w["state"], w["queues"]) for w in listed] == [("w1", "live", ["default"])]
    queues = {q["name"]: q for q in client.get(f"{API}/queues").json()["queues"]}
    assert queues["emails"] == {
        "name": "emails", "due": 1, "running": 0, "paused": False, "served_by": [], "unserved": True
    }  # fmt: skip
    assert queues["default"]["served_by"] == ["w1"]
    assert client.get(f"{API}/queues?x=1").json()["error"]["code"] == "unknown_parameter"
    # Viewing is not changing.
    assert client.post(f"{API}/queues/emails/pause").status_code == 403
    assert not QueueState.objects.exists()


def test_pause_and_resume_with_a_token(django_user_model):
    client = _token_client(_user(django_user_model, "change_workflowrun"))
    three_steps.run({}, queue="emails")
    answer = client.post(f"{API}/queues/emails/pause")
    assert answer.status_code == 200
    assert answer.json() == {
        "queue": {"name": "emails", "due": 1, "running": 0, "paused": True, "served_by": [], "unserved": False},
        "changed": True,
    }
    assert QueueState.objects.get(name="emails").changed_by == "API: ops"
    assert client.post(f"{API}/queues/emails/pause").json()["changed"] is False
    assert client.post(f"{API}/queues/emails/resume").json()["queue"]["paused"] is False
    assert client.get(f"{API}/queues/emails/pause").status_code == 405


def test_a_bad_queue_name_is_a_400(django_user_model):
    client = _token_client(_user(django_user_model, "change_workflowrun"))
    answer = client.post(f"{API}/queues/{'x' * 65}/pause")
    assert answer.status_code == 400
    assert answer.json()["error"]["field"] == "name"
    assert not QueueState.objects.exists()


def test_a_session_needs_the_csrf_token(django_user_model):
    _user(django_user_model, "change_workflowrun")
    client = Client(enforce_csrf_checks=True)
    client.login(username="ops", password="pw")
    refused = client.post(f"{API}/queues/emails/pause")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
    assert not QueueState.objects.exists()
    client.get("/admin/login/")  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    assert client.post(f"{API}/queues/emails/pause", headers={"X-CSRFToken": token}).status_code == 200
    assert json.loads(client.get(f"{API}/queues").content)["queues"]


def test_resuming_a_queue_nothing_uses_answers_its_state(django_user_model):
    client = _token_client(_user(django_user_model, "change_workflowrun"))
    answer = client.post(f"{API}/queues/unused/resume")
    assert answer.status_code == 200
    assert answer.json()["queue"] == {
        "name": "unused", "due": 0, "running": 0, "paused": False, "served_by": [], "unserved": False
    }  # fmt: skip
