"""Live pages, server side (admin/live.py): the regions live.js swaps, the setting, permissions, messages.

The browser half (a page that changes without a reload) is test_browser_live.py.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.core import checks
from django.urls import reverse

from django_openworkflow.testing import override_openworkflow
from tests.admin.helpers import LIST_URL, action_url, make_run, one_of_each, run_url

DASHBOARD_URL = reverse("admin:django_openworkflow_workflowrun_dashboard")
POLL = {"HTTP_X_OPENWORKFLOW_LIVE": "1"}
RUN_REGIONS = ("title", "controls", "summary", "progress", "error", "timeline", "journal", "signals", "payloads")


def regions(page: str) -> list[str]:
    return re.findall(r'data-owf-live-region="([^"]+)"', page)


def live_attribute(page: str) -> str | None:
    found = re.search(r'data-owf-live="(\d+)"', page)
    return found.group(1) if found else None


@pytest.mark.django_db
def test_a_running_runs_page_is_live_and_marks_its_regions(admin_client: Any) -> None:
    page = admin_client.get(run_url(one_of_each()["parked"])).content.decode()
    assert live_attribute(page) == "10"  # the default
    assert "data-owf-live-finished" not in page
    assert regions(page) == list(RUN_REGIONS)
    assert re.search(r'<script src="[^"]*django_openworkflow/live\.js" defer></script>', page)
    assert "live · updated %(seconds)s s ago" in page  # the indicator's texts, for the script
    assert finders.find("django_openworkflow/live.js") and finders.find("django_openworkflow/live.css")


@pytest.mark.django_db
def test_a_finished_runs_page_says_so_and_the_script_stops_there(admin_client: Any) -> None:
    page = admin_client.get(run_url(one_of_each()["completed"])).content.decode()
    assert live_attribute(page) == "10" and "data-owf-live-finished" in page
    assert regions(page) == list(RUN_REGIONS)


@pytest.mark.django_db
def test_the_list_and_the_dashboard_are_live(admin_client: Any) -> None:
    one_of_each()
    with override_openworkflow(ADMIN_LIVE_SECONDS=3):
        listing = admin_client.get(LIST_URL + "?status=failed").content.decode()
        dashboard = admin_client.get(DASHBOARD_URL).content.decode()
    assert live_attribute(listing) == "3" and live_attribute(dashboard) == "3"
    assert regions(listing) == ["counts", "results"]
    assert 'data-owf-live-region="results" data-owf-live-rows>' in listing
    assert regions(dashboard) == ["dashboard"]
    assert "data-owf-live-finished" not in listing + dashboard


@pytest.mark.django_db
@pytest.mark.parametrize("value", [0, "fast", -1, True, 2.5])
def test_zero_or_a_bad_value_leaves_the_pages_as_served(admin_client: Any, value: Any) -> None:
    runs = one_of_each()
    with override_openworkflow(ADMIN_LIVE_SECONDS=value):
        pages = [admin_client.get(url) for url in (run_url(runs["parked"]), LIST_URL, DASHBOARD_URL)]
        errors = [m for m in checks.run_checks() if m.id == "openworkflow.E005"]
    for response in pages:
        assert response.status_code == 200
        page = response.content.decode()
        assert live_attribute(page) is None and "live.js" not in page and "owf-live-text" not in page
    if value == 0:
        assert errors == []
    else:
        assert [e.msg for e in errors] == [
            f"OPENWORKFLOW['ADMIN_LIVE_SECONDS'] must be a whole number of seconds, at least 0, got {value!r}"
        ]


@pytest.mark.django_db
def test_a_poll_needs_the_admins_permissions(client: Any, staff_client: Any, django_user_model: Any) -> None:
    run = make_run()
    anonymous = client.get(run_url(run), **POLL)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]
    nobody = staff_client()
    for url in (run_url(run), LIST_URL, DASHBOARD_URL):
        assert nobody.get(url, **POLL).status_code == 403
    user = django_user_model.objects.get(username="staff")
    user.user_permissions.add(
        Permission.objects.get(codename="view_workflowrun", content_type__app_label="django_openworkflow")
    )
    for url in (run_url(run), LIST_URL, DASHBOARD_URL):
        response = nobody.get(url, **POLL)
        assert response.status_code == 200 and live_attribute(response.content.decode()) == "10"


@pytest.mark.django_db
def test_a_poll_of_a_run_that_is_gone_is_a_404_not_a_500(admin_client: Any) -> None:
    run = make_run()
    run.delete()
    assert admin_client.get(run_url(run), **POLL).status_code == 404


@pytest.mark.django_db
def test_a_poll_leaves_the_users_messages_for_the_next_page(admin_client: Any) -> None:
    """A poll from another tab between an action's redirect and its page must not eat the action's report."""
    cancel, other = make_run(), make_run()
    assert admin_client.post(action_url(cancel, "cancel")).status_code == 302  # the report is stored
    for url in (run_url(other), LIST_URL, DASHBOARD_URL):
        polled = admin_client.get(url, **POLL)
        assert polled.status_code == 200 and live_attribute(polled.content.decode()) == "10"
    page = admin_client.get(run_url(cancel)).content.decode()
    assert "Canceled: 1 run." in page
    # A page the user opens does read them, once.
    assert "Canceled: 1 run." not in admin_client.get(run_url(cancel)).content.decode()
