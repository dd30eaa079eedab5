"""The Workers page in a real browser: the themed example admin, a real worker, light and dark, 1400 and 390 px.

Beside the seeded runs (``test_browser.py``'s ``example_admin``), a
``runworkflows --queue default`` worker runs against the example project's
database, runs wait in the queue ``emails`` (which it does not serve) and
in the queue ``billing`` (paused). The page must show the live worker, the
seeding worker as stopped, ``emails`` as unserved with the warning (also on
the run list and the dashboard) and ``billing`` as paused; Pause and Resume
must work through their forms; nothing may stick out of the page at 390 px.
With OPENWORKFLOW_SCREENSHOTS=docs, ``docs/workers.png`` is refreshed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.admin.browser_checks import JOURNAL_JS
from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
    PHONE,
    ROOT,
    WCAG_AA,
    WIDE,
    Watched,
    _contrast_problems,
    _sidebar_open,
    chromium,
    docs_picture,
    example_admin,  # noqa: F401  (a fixture)
    log_in,
    pytestmark,  # noqa: F401  (skipped without the browser)
    server_problems,
    snapshot,
)
from tests.conftest import CEILING

WORKERS_PATH = "/admin/django_openworkflow/workerprocess/"


def seed_queues() -> None:
    """Run in a subprocess on the example project's settings: due runs in two queues, one of them paused."""
    import django

    django.setup()
    from django_openworkflow.store import workers
    from example_project.demo.workflows import onboard_user

    for user_id in (1, 2, 3):
        onboard_user.run({"user_id": user_id, "email": f"u{user_id}@example.com", "delay": "1s"}, queue="emails")
    onboard_user.run({"user_id": 9, "email": "billing@example.com", "delay": "1s"}, queue="billing")
    workers.set_paused("billing", True, "browser test")


def _env(tmp_path: Path) -> dict[str, str]:
    """The example project's environment, on the database ``example_admin`` made (same ``tmp_path``)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }


def test_the_workers_page_in_a_real_browser(example_admin: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    env = _env(tmp_path)
    seed = "from tests.admin.test_browser_workers import seed_queues as s; s()"
    subprocess.run([sys.executable, "-c", seed], env=env, cwd=ROOT, check=True, timeout=CEILING)
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworkflows", "--queue", "default", "--poll", "200ms"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = example_admin["base"]
    try:
        with chromium() as browser:
            for scheme in ("dark", "light"):
                context = browser.new_context(viewport=WIDE, color_scheme=scheme)
                watched = Watched(context.new_page())
                _look(watched.page, base, scheme)
                if scheme == "light":
                    _pause_and_resume(watched.page)
                context.close()
                assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    finally:
        worker.terminate()
        worker.wait(30)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "readme-workers.png", DOCS / "workers.png")


def _look(page: Any, base: str, scheme: str) -> None:
    log_in(page, base, WORKERS_PATH)
    # The worker started before the browser: its row is there once it has started up. The queue
    # table is read before the worker list, in the same request: a page loaded while the worker
    # wrote its row can list it live below and not yet beside its queue. Both are waited for.
    serving = page.locator(".owf-queue-row[data-queue=default] code")  # the queue and its worker
    deadline = time.monotonic() + CEILING
    while page.locator(".owf-worker-live").count() == 0 or serving.count() < 2:
        assert time.monotonic() < deadline, "the worker's row did not show as live and serving 'default'"
        time.sleep(0.5)
        page.reload()
    assert serving.count() == 2
    assert page.locator(".owf-worker-stopped").count() == 1  # the worker that seeded the runs
    emails = page.locator(".owf-queue-row[data-queue=emails]")
    assert "unserved" in emails.inner_text() and "3" in emails.inner_text()
    assert "paused" in page.locator(".owf-queue-row[data-queue=billing]").inner_text()
    banner = page.locator(".owf-unserved")
    assert "No live worker serves queue emails: its 3 due runs wait" in banner.inner_text()
    if not _sidebar_open(page):
        page.click("#toggle-nav-sidebar")
    _fits(page, f"{scheme}, {WIDE['width']} px with the sidebar open")
    problems = _contrast_problems(page, ".owf-queue-states button") + _contrast_problems(page, ".owf-badge")
    assert problems == [], f"{scheme}: text under {WCAG_AA}:1 contrast:\n" + "\n".join(problems)
    snapshot(page, f"workers-{scheme}.png", full_page=True)
    if scheme == "light":
        docs_picture(page, "readme-workers.png")
    page.set_viewport_size(PHONE)
    _fits(page, f"{scheme}, {PHONE['width']} px")
    snapshot(page, f"workers-{scheme}-{PHONE['width']}.png", full_page=True)
    page.set_viewport_size(WIDE)
    # The run list and the dashboard say it too, and link here.
    for path in ("/admin/django_openworkflow/workflowrun/", "/admin/django_openworkflow/workflowrun/dashboard/"):
        page.goto(f"{base}{path}")
        assert "No live worker serves queue emails" in page.locator(".owf-unserved").inner_text()
    page.locator(".owf-unserved a").first.click()
    page.wait_for_url(f"**{WORKERS_PATH}")


def _fits(page: Any, where: str) -> None:
    """The page does not scroll sideways (the queue table and the list may scroll inside their own boxes)."""
    problems = page.evaluate(JOURNAL_JS)
    wrap = page.evaluate(
        "() => { const w = document.querySelector('.owf-queue-wrap'); return [w.scrollWidth, w.clientWidth]; }"
    )
    if wrap[0] > wrap[1] + 1:
        problems.append(f"the queue table scrolls sideways: {wrap[0]} px in {wrap[1]} px")
    assert problems == [], f"{where}:\n" + "\n".join(problems)


def _pause_and_resume(page: Any) -> None:
    page.goto(page.url.split("?")[0])
    page.locator(".owf-queue-row[data-queue=emails] button").click()
    page.wait_for_load_state()
    assert "Queue emails paused" in page.locator(".messagelist").first.inner_text()
    assert "paused" in page.locator(".owf-queue-row[data-queue=emails]").inner_text()
    assert page.locator(".owf-unserved").count() == 0  # paused on purpose: no warning
    page.locator(".owf-queue-row[data-queue=emails] button").click()
    page.wait_for_load_state()
    assert "Queue emails resumed" in page.locator(".messagelist").first.inner_text()
    assert "unserved" in page.locator(".owf-queue-row[data-queue=emails]").inner_text()
