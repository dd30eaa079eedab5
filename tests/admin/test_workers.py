"""The Workers page, its queue table's pause and resume buttons, and the unserved-queue warning elsewhere."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_openworkflow.models import QueueState, WorkerProcess
from django_openworkflow.store import get_backend, workers
from tests.admin.test_i18n import left_in_english, localized  # noqa: F401  (a fixture)
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db

WORKERS_URL = reverse("admin:django_openworkflow_workerprocess_changelist")
LIST_URL = reverse("admin:django_openworkflow_workflowrun_changelist")
DASHBOARD_URL = reverse("admin:django_openworkflow_workflowrun_dashboard")


def _queue_url(name: str, action: str) -> str:
    return reverse("admin:django_openworkflow_workerprocess_queue", args=[name, action])


def _worker(worker_id: str, queues: list[str], *, seen_ago: timedelta = timedelta(0)) -> None:
    workers.register(
        worker_id, host="web-1", pid=42, version="0.3.0", queues=queues, slots=8, heartbeat=timedelta(seconds=10)
    )
    if seen_ago:
        WorkerProcess.objects.filter(worker_id=worker_id).update(last_seen_at=get_backend().now() - seen_ago)


def test_the_page_lists_workers_and_queues_and_flags_the_unserved_one(admin_client: Any) -> None:
    _worker("web-1:42:live", ["default"])
    _worker("web-1:41:dead", ["emails"], seen_ago=timedelta(minutes=2))
    workers.mark_stopped("web-1:41:dead")  # stopped cleanly, after all
    _worker("web-1:40:gone", ["emails"], seen_ago=timedelta(minutes=2))
    three_steps.run({}, queue="emails")
    html = admin_client.get(WORKERS_URL).content.decode()
    assert "web-1:42:live" in html and "owf-worker-live" in html
    assert "owf-worker-stopped" in html and "owf-worker-dead" in html
    assert 'class="messagelist owf-unserved"' in html and "<code>emails</code>: its 1 due run waits" in html
    assert _queue_url("emails", "pause") in html  # a superuser may pause
    for url in (LIST_URL, DASHBOARD_URL):
        page = admin_client.get(url).content.decode()
        assert "<code>emails</code>: its 1 due run waits" in page and WORKERS_URL in page


def test_a_dead_workers_busy_slots_read_as_lost(admin_client: Any) -> None:
    _worker("web-1:42:live", ["default"])
    _worker("web-1:41:dead", ["default"], seen_ago=timedelta(minutes=2))
    WorkerProcess.objects.update(slots_busy=3)
    html = admin_client.get(WORKERS_URL).content.decode()
    cells = html.split('<td class="field-slots">')[1:]
    assert sorted(cell.split("</td>")[0] for cell in cells) == ["3 lost of 8", "3/8"]


def test_no_warning_while_every_queue_with_due_runs_is_served_or_paused(admin_client: Any) -> None:
    _worker("w", ["*"])
    three_steps.run({}, queue="emails")
    assert "owf-unserved" not in admin_client.get(LIST_URL).content.decode()
    WorkerProcess.objects.all().delete()
    workers.set_paused("emails", True)
    assert "owf-unserved" not in admin_client.get(DASHBOARD_URL).content.decode()
    assert "paused" in admin_client.get(WORKERS_URL).content.decode()


def test_pause_and_resume_buttons(admin_client: Any) -> None:
    answer = admin_client.post(_queue_url("emails", "pause"))
    assert answer.status_code == 302 and answer["Location"] == WORKERS_URL
    assert QueueState.objects.get(name="emails").paused
    page = admin_client.get(WORKERS_URL).content.decode()
    assert "Queue emails paused" in page and _queue_url("emails", "resume") in page
    admin_client.post(_queue_url("emails", "resume"))
    assert not QueueState.objects.get(name="emails").paused
    assert admin_client.get(_queue_url("emails", "pause")).status_code == 405
    bad = admin_client.post(_queue_url("no spaces", "pause"), follow=True).content.decode()
    assert "queue must be 1 to 64 characters" in bad
    assert admin_client.post(_queue_url("emails", "explode")).status_code == 403


def test_viewing_needs_the_runs_view_permission_and_pausing_the_change_one(django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    client = Client()
    client.login(username="ops", password="pw")
    assert client.get(WORKERS_URL).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    page = client.get(WORKERS_URL)
    assert page.status_code == 200 and _queue_url("default", "pause") not in page.content.decode()
    assert client.post(_queue_url("default", "pause")).status_code == 403
    assert not QueueState.objects.exists()


def test_the_pause_form_needs_the_csrf_token(django_user_model: Any) -> None:
    django_user_model.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="root", password="pw")
    assert client.post(_queue_url("default", "pause")).status_code == 403
    assert not QueueState.objects.exists()


def test_the_workers_page_in_french_leaves_no_english(admin_client: Any, localized: None) -> None:  # noqa: F811
    _worker("web-1:42:live", ["default"])
    _worker("web-1:40:gone", ["emails"], seen_ago=timedelta(minutes=2))
    three_steps.run({}, queue="emails")
    workers.set_paused("billing", True)
    # What the workers wrote (their ids and host) is data, not English.
    assert [text for text in left_in_english(admin_client, WORKERS_URL) if "web-1" not in text] == []
    assert left_in_english(admin_client, LIST_URL) == []
    french = admin_client.get(WORKERS_URL, HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "Aucun exécuteur actif ne sert la file" in french and "Suspendre" in french
