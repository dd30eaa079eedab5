"""The Inbox in a real browser: a manager approves a refund, a real worker finishes the run.

On the example project (``test_browser.py``'s ``example_admin``), a
``refund-approval`` run waits for the ``managers`` group; a staff user of
that group (not a superuser) logs in, finds it in the Inbox with what is
being approved and a link to the run, approves it with a comment, and the
worker completes the run with the decision. With
OPENWORKFLOW_SCREENSHOTS=docs, ``docs/approvals.png`` is refreshed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
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
from tests.conftest import CEILING

INBOX_PATH = "/admin/django_openworkflow/approval/"


def seed_refund() -> None:
    """Run in a subprocess on the example project's settings: a manager (staff, in "managers"), a refund run."""
    import django

    django.setup()
    from django.contrib.auth.models import Group, User

    from example_project.demo.workflows import refund_approval

    manager = User.objects.create_user("grace", password=PASSWORD, is_staff=True)
    manager.groups.add(Group.objects.get_or_create(name="managers")[0])
    refund_approval.run({"order_id": 1042, "amount": 120, "customer": "Ada Lovelace"})


def test_a_manager_approves_from_the_inbox(example_admin: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    seed = "from tests.admin.test_browser_approvals import seed_refund as s; s()"
    subprocess.run([sys.executable, "-c", seed], env=env, cwd=ROOT, check=True, timeout=CEILING)
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworkflows", "--poll", "100ms"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = example_admin["base"]
    try:
        with chromium() as browser:
            context = browser.new_context(viewport=WIDE, color_scheme="light")
            watched = Watched(context.new_page())
            _approve(watched.page, base)
            context.close()
            assert watched.errors == [], "errors in the browser:\n" + "\n".join(watched.errors)
        # The worker delivers the decision to the run, which refunds.
        result = (
            "import django; django.setup(); from django_openworkflow import get_run;"
            "from django_openworkflow.models import WorkflowRun;"
            f"print(get_run(WorkflowRun.objects.get(workflow_name='refund-approval').id).result(timeout={CEILING}))"
        )
        done = subprocess.run(
            [sys.executable, "-c", result], env=env, cwd=ROOT, check=True, timeout=CEILING, capture_output=True
        )
        assert "'refunded': 120" in done.stdout.decode()
    finally:
        worker.terminate()
        worker.wait(30)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "readme-approvals.png", DOCS / "approvals.png")


def _approve(page: Any, base: str) -> None:
    log_in(page, base, INBOX_PATH, user="grace")
    deadline = time.monotonic() + CEILING
    while page.locator(".owf-approval").count() == 0:  # once the worker has run the run to its wait
        assert time.monotonic() < deadline, "the approval did not show in the inbox"
        time.sleep(0.3)
        page.reload()
    row = page.locator(".owf-approval")
    assert "Refund 120 EUR to Ada Lovelace (order 1042)" in row.inner_text()
    assert "refund-approval" in row.inner_text()
    row.locator("textarea[name=comment]").fill("Loyal customer, approved.")
    docs_picture(page, "readme-approvals.png")
    row.locator("button[value=approve]").click()
    page.wait_for_load_state()
    assert "Approved." in page.locator(".messagelist").first.inner_text()
    assert page.locator(".owf-approval").count() == 0
    assert "no open approval is assigned to you" in page.locator("#content-main").inner_text()
