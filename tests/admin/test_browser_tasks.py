"""A human task in a real browser: an agent claims it, fills in its form, is refused, corrects it, submits.

On the example project (``test_browser.py``'s ``example_admin``), a
``refund-request`` run waits for a form from the ``support`` group. Two
agents (staff, not superusers) log in: the navigation counts the task for
both; sam claims it, and kim then sees it as sam's, with no form to fill
in; sam's first submission (reason "Other", no note) comes back with the
form's own error and nothing delivered; the corrected one is delivered and
a real worker completes the run with it. With OPENWORKFLOW_SCREENSHOTS=docs,
``docs/human-task.png`` (the form with its error) and ``docs/task-claimed.png``
(the Inbox of the agent who did not claim it) are refreshed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
    PASSWORD,
    ROOT,
    WIDE,
    Watched,
    chromium,
    docs_picture,
    example_admin,  # noqa: F401  (a fixture)
    log_in,
    pytestmark,  # noqa: F401  (skipped without the browser)
    server_problems,
)
from tests.conftest import CEILING, wait_until

INBOX_PATH = "/admin/django_openworkflow/approval/"


def seed_refund_request() -> None:
    """Run in a subprocess on the example project's settings: two support agents, a refund-request run."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User

    from example_project.demo.workflows import refund_request

    support = Group.objects.get_or_create(name="support")[0]
    for name in ("sam", "kim"):
        User.objects.create_user(name, password=PASSWORD, is_staff=True).groups.add(support)
    refund_request.run({"order_id": 1045, "total": "18.50", "customer": "Ada Lovelace"})


def _in_project(env: dict[str, str], code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {code}"],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=CEILING,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def test_an_agent_claims_fills_in_and_submits_a_task_form(example_admin: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    _in_project(env, "from tests.admin.test_browser_tasks import seed_refund_request as s; s()")
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworkflows", "--poll", "100ms"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    opened = "from django_openworkflow.models import Approval; print(Approval.objects.exclude(form='').count())"
    base = example_admin["base"]
    try:
        wait_until(lambda: _in_project(env, opened) == "1", timeout=CEILING)  # the worker ran the run to its task
        with chromium() as browser:
            sam = Watched(browser.new_context(viewport=WIDE, color_scheme="light").new_page())
            kim = Watched(browser.new_context(viewport=WIDE, color_scheme="light").new_page())
            log_in(sam.page, base, INBOX_PATH, user="sam")
            log_in(kim.page, base, INBOX_PATH, user="kim")
            _claim_and_submit(sam.page, kim.page, base)
            assert sam.errors == [] and kim.errors == [], "errors in the browser:\n" + "\n".join(
                sam.errors + kim.errors
            )
        result = (
            "from django_openworkflow import get_run; from django_openworkflow.models import WorkflowRun;"
            f"print(get_run(WorkflowRun.objects.get(workflow_name='refund-request').id).result(timeout={CEILING}))"
        )
        assert _in_project(env, result) == "{'order_id': 1045, 'refunded': '18.50', 'by': 'sam'}"
    finally:
        worker.terminate()
        worker.wait(CEILING)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "readme-human-task.png", DOCS / "human-task.png")
        shutil.copyfile(ARTIFACTS / "readme-task-claimed.png", DOCS / "task-claimed.png")


def _claim_and_submit(sam: Any, kim: Any, base: str) -> None:
    # Both agents see the task, and the admin's index counts it ("Inbox (1)": WorkflowAdminSite).
    for page in (sam, kim):
        page.goto(f"{base}/admin/")
        assert "Inbox (1)" in page.locator("#content-main").inner_text()
        page.goto(f"{base}{INBOX_PATH}")
        assert "Order 1045 for Ada Lovelace" in page.locator(".owf-approval").inner_text()
    sam.locator(".owf-approval button[value=claim]").click()
    sam.wait_for_load_state()
    assert "Claimed" in sam.locator(".messagelist").first.inner_text()
    kim.reload()
    row = kim.locator(".owf-approval")
    assert "claimed by sam" in row.inner_text() and row.locator(".owf-task-link").count() == 0
    docs_picture(kim, "readme-task-claimed.png")
    # The form, with the run's initial value; "Other" without a note: refused by the form's clean().
    sam.locator(".owf-approval .owf-task-link").click()
    sam.wait_for_load_state()
    assert sam.input_value("#id_amount") == "18.50"
    sam.select_option("#id_reason", "other")
    sam.click(".submit-row input[type=submit]")
    sam.wait_for_load_state()
    assert "Say why in the note." in sam.locator(".owf-task").inner_text()
    docs_picture(sam, "readme-human-task.png")
    sam.fill("#id_note", "Arrived broken twice")
    sam.click(".submit-row input[type=submit]")
    sam.wait_for_load_state()
    assert "Submitted." in sam.locator(".messagelist").first.inner_text()
    assert sam.locator(".owf-approval").count() == 0
