"""The cron schedules' admin (admin/schedules.py): next fire times, pause and resume, nothing added or deleted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_openworkflow.client.schedules import next_ticks
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import Schedule as ScheduleRow
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.worker.schedules import fire_due_schedules, sync_schedules
from tests.fixtures import schedule_workflows
from tests.fixtures.schedule_workflows import EVERY_MINUTE, PARIS

LIST_URL = reverse("admin:django_openworkflow_schedule_changelist")


def keys(name: str) -> list[str]:
    return sorted(WorkflowRun.objects.filter(workflow_name=name).values_list("idempotency_key", flat=True))


@pytest.fixture
def scheduled() -> Iterator[list[Any]]:
    specs = schedule_workflows.declare()
    yield specs
    for spec in specs:
        registry.unregister(spec.name, spec.version)


@pytest.mark.django_db
def test_admin_lists_next_fire_times_and_pauses_and_resumes(scheduled, admin_client):
    sync_schedules()
    response = admin_client.get(LIST_URL)
    assert response.status_code == 200
    html = response.content.decode()
    row = ScheduleRow.objects.get(name=PARIS)
    for tick in next_ticks(row, 3):
        assert tick.astimezone(schedule_zone(row)).strftime("%Y-%m-%d %H:%M:%S %Z") in html
    assert "* * * * *" in html and "Europe/Paris" in html

    every = ScheduleRow.objects.get(name=EVERY_MINUTE)
    response = admin_client.post(LIST_URL, {"action": "pause", "_selected_action": [every.pk]}, follow=True)
    assert "Paused 1 schedule(s)" in response.content.decode()
    assert ScheduleRow.objects.get(pk=every.pk).paused
    fire_due_schedules(now=get_backend().now() + timedelta(minutes=2))
    assert keys(EVERY_MINUTE) == []

    # A resume does not start the ticks that passed during the pause, even under "latest".
    ScheduleRow.objects.filter(pk=every.pk).update(next_tick_at=get_backend().now() - timedelta(minutes=3))
    response = admin_client.post(LIST_URL, {"action": "resume", "_selected_action": [every.pk]}, follow=True)
    assert "Resumed 1 schedule(s)" in response.content.decode()
    resumed = ScheduleRow.objects.get(pk=every.pk)
    assert not resumed.paused and resumed.next_tick_at > get_backend().now()
    fire_due_schedules()
    assert keys(EVERY_MINUTE) == []


@pytest.mark.django_db
def test_admin_adds_and_deletes_no_schedule(scheduled, admin_client):
    sync_schedules()
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    assert admin_client.get(reverse("admin:django_openworkflow_schedule_add")).status_code == 403
    assert admin_client.get(reverse("admin:django_openworkflow_schedule_delete", args=[row.pk])).status_code == 403
    page = admin_client.get(reverse("admin:django_openworkflow_schedule_change", args=[row.pk]))
    assert page.status_code == 200
    assert 'name="cron"' not in page.content.decode()  # read-only: declared in code


def schedule_zone(row: ScheduleRow) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(row.timezone)


@pytest.mark.django_db
def test_the_schedules_pages_read_as_read_only(admin_client):
    now = get_backend().now()
    ScheduleRow.objects.create(
        name="every", cron="*/1 * * * *", timezone="Europe/Paris", last_tick_at=now, next_tick_at=now, paused=False
    )
    stopped = ScheduleRow.objects.create(name="stopped", cron="0 3 * * *", timezone="UTC", paused=True)
    html = admin_client.get(LIST_URL).content.decode()
    assert "<title>Schedules |" in html and "<h1>Schedules</h1>" in html
    assert "Select schedule to change" not in html
    # The cron expression is one unwrapped token; "not paused" reads as words, not a red cross.
    assert '<code class="owf-nowrap">*/1 * * * *</code>' in html and "Europe/<wbr>Paris" in html
    assert '<td class="field-state">active</td>' in html
    assert '<span class="owf-badge owf-status-parked">paused</span>' in html
    assert html.count('src="/static/admin/img/icon-no.svg"') == 2  # "In code" only: neither is declared
    # One date format: the last tick as the next fire times, in the schedule's zone.
    paris = now.astimezone(schedule_zone(ScheduleRow.objects.get(name="every")))
    assert f'<td class="field-last_tick"><span class="owf-nowrap">{paris:%Y-%m-%d %H:%M:%S %Z}</span></td>' in html
    assert '<td class="field-last_tick">-</td>' in html

    url = reverse("admin:django_openworkflow_schedule_change", args=[stopped.pk])
    page = admin_client.get(url).content.decode()
    assert "<h1>View schedule</h1>" in page and 'name="_save"' not in page and "_continue" not in page
    assert f"{stopped.created_at.astimezone(schedule_zone(stopped)):%Y-%m-%d %H:%M:%S %Z}" in page
    assert admin_client.post(url, {"name": "x"}).status_code == 403
    assert ScheduleRow.objects.get(pk=stopped.pk).name == "stopped"


# -- trigger now and backfill -------------------------------------------------------


def backfill_url(row: ScheduleRow) -> str:
    return reverse("admin:django_openworkflow_schedule_backfill", args=[row.pk])


def operator(django_user_model: Any, *permissions: str) -> Any:
    """A staff user with these permissions (codenames of the app's models), logged in."""
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    for codename in permissions:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="django_openworkflow")
        )
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_trigger_now_starts_a_run_outside_the_cadence(scheduled, admin_client):
    sync_schedules()
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    html = admin_client.get(LIST_URL).content.decode()
    assert "Start a run of the selected schedules now" in html and "allow_all" in html
    response = admin_client.post(LIST_URL, {"action": "trigger_now", "_selected_action": [row.pk]}, follow=True)
    assert "Started 1 run(s) now" in response.content.decode()
    [key] = keys(EVERY_MINUTE)
    assert key.startswith("schedule:now:")


@pytest.mark.django_db
def test_trigger_now_and_backfill_need_the_add_permission_on_runs(scheduled, django_user_model):
    sync_schedules()
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    client = operator(django_user_model, "view_schedule", "change_schedule")
    assert "trigger_now" not in client.get(LIST_URL).content.decode()  # pause and resume are offered
    client.post(LIST_URL, {"action": "trigger_now", "_selected_action": [row.pk]})
    assert client.get(backfill_url(row)).status_code == 403
    assert (
        client.post(backfill_url(row), {"start": "2026-01-01 00:00:00", "end": "2026-01-01 00:05:00"}).status_code
        == 403
    )
    assert keys(EVERY_MINUTE) == []
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.get(username="operator")
    user.user_permissions.add(Permission.objects.get(codename="add_workflowrun"))
    client.post(LIST_URL, {"action": "trigger_now", "_selected_action": [row.pk]})
    assert client.get(backfill_url(row)).status_code == 200
    assert len(keys(EVERY_MINUTE)) == 1


@pytest.mark.django_db
def test_the_backfill_form_starts_the_runs_of_past_ticks_once(scheduled, admin_client):
    sync_schedules()
    row = ScheduleRow.objects.get(name=PARIS)
    page = admin_client.get(reverse("admin:django_openworkflow_schedule_change", args=[row.pk])).content.decode()
    assert backfill_url(row) in page
    form = admin_client.get(backfill_url(row)).content.decode()
    assert 'name="start"' in form and "csrfmiddlewaretoken" in form and "at most 10000 ticks" in form
    # Times in the schedule's zone: 02:00 in Paris is 01:00 UTC in winter.
    dates = {"start": "2026-01-10 00:00:00", "end": "2026-01-12 00:00:00"}
    response = admin_client.post(backfill_url(row), dates, follow=True)
    assert "Backfilled 2 tick(s) of sched-paris: 2 new run(s)" in response.content.decode()
    assert keys(PARIS) == ["schedule:2026-01-10T01:00:00+00:00", "schedule:2026-01-11T01:00:00+00:00"]
    response = admin_client.post(backfill_url(row), dates, follow=True)
    assert "Backfilled 2 tick(s) of sched-paris: 0 new run(s)" in response.content.decode()
    assert len(keys(PARIS)) == 2


@pytest.mark.django_db
def test_a_bad_backfill_range_is_shown_on_the_form(scheduled, admin_client):
    sync_schedules()
    row = ScheduleRow.objects.get(name=EVERY_MINUTE)
    page = admin_client.post(backfill_url(row), {"start": "2026-01-02 00:00:00", "end": "2026-01-01 00:00:00"})
    assert page.status_code == 200 and "must be before end" in page.content.decode()
    page = admin_client.post(backfill_url(row), {"start": "2020-01-01 00:00:00", "end": "2026-01-01 00:00:00"})
    assert "holds more than 10000 ticks" in page.content.decode()
    assert admin_client.post(backfill_url(row), {"start": "soon"}).status_code == 200
    assert keys(EVERY_MINUTE) == []


@pytest.mark.django_db
def test_the_backfill_form_needs_the_csrf_token(scheduled, django_user_model):
    sync_schedules()
    row = ScheduleRow.objects.get(name=PARIS)
    django_user_model.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.login(username="root", password="pw")
    dates = {"start": "2026-01-10 00:00:00", "end": "2026-01-12 00:00:00"}
    assert client.post(backfill_url(row), dates).status_code == 403
    assert client.post(LIST_URL, {"action": "trigger_now", "_selected_action": [row.pk]}).status_code == 403
    assert keys(PARIS) == []
