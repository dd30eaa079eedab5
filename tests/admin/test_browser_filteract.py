"""A list action on every run a filter matches ("Select all"), in the themed admin, in a real browser.

The example project of ``test_browser.py``, with 130 more runs of one
workflow (120 failed, 10 completed; it seeds one failed itself): the
operator filters by workflow, selects the page, then "Select all", and
asks to retry from the failed step. The confirmation counts all 131 runs,
says 121 will change and 10 be skipped and why, lists only the newest; it is looked at in light
and dark, at 1400 and 390 px (screenshots in ``tests/artifacts/``, and in
``docs/`` with OPENWORKFLOW_SCREENSHOTS=docs); then the action runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.admin.browser_checks import CONTRAST_JS
from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
    PHONE,
    ROOT,
    WCAG_AA,
    WIDE,
    Watched,
    _list_url,
    chromium,
    example_admin,  # noqa: F401  (a fixture)
    log_in,
    pytestmark,  # noqa: F401  (skipped without Chromium, and on a server database's leg of Django 5.2)
    server_problems,
    snapshot,
)
from tests.conftest import CEILING

FAILED, COMPLETED = 120, 10
FILTER = "?workflow=import-orders"
DOCS_PICTURES = {"select-all-confirm-light-1400.png", "select-all-confirm-dark-390.png"}


def seed_many_runs() -> None:
    """Run in a subprocess on the example project's settings: 120 failed and 10 completed import-orders runs."""
    import django

    django.setup()
    from django.utils import timezone

    from django_openworkflow.models import WorkflowRun

    now = timezone.now()
    error = {"type": "ValueError", "message": "order 17: unknown currency 'XBT'", "step": "parse-orders"}
    common = {"workflow_name": "import-orders", "version": "2026.11-hotfix", "available_at": now, "started_at": now}
    WorkflowRun.objects.bulk_create(
        [
            WorkflowRun(**common, input={"date": f"2026-10-{1 + i % 28:02d}"}, status="failed", error=error)
            for i in range(FAILED)
        ]
        + [
            WorkflowRun(**common, input={"date": f"2026-09-{1 + i:02d}"}, status="completed", finished_at=now)
            for i in range(COMPLETED)
        ]
    )


def test_an_action_on_every_run_matching_the_filter(example_admin: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",  # the fixture's file: same tmp_path
        "PYTHONPATH": str(ROOT),
    }
    seed = "from tests.admin.test_browser_filteract import seed_many_runs as s; s()"
    subprocess.run([sys.executable, "-c", seed], env=env, cwd=ROOT, check=True, timeout=CEILING)
    base = example_admin["base"]
    with chromium() as browser:
        for scheme in ("dark", "light"):  # light last: it also confirms
            for viewport in (PHONE, WIDE):  # wide last: it confirms
                context = browser.new_context(viewport=viewport, color_scheme=scheme)
                watched = Watched(context.new_page())
                page = watched.page
                log_in(page, base)
                _ask_for_every_matching_run(page, base)
                _check_confirmation(page, viewport["width"])
                name = f"select-all-confirm-{scheme}-{viewport['width']}.png"
                snapshot(page, name, full_page=True)
                if scheme == "light" and viewport == WIDE:
                    page.click("input[type=submit][value^='Yes']")
                    page.wait_for_load_state()
                    done = f"Sent back to pending: {FAILED + 1} runs."
                    assert page.locator(".messagelist .success").inner_text() == done
                    assert page.locator(".messagelist .warning", has_text="Retry from failed step").inner_text() == (
                        f"Retry from failed step: skipped {COMPLETED} runs: it has not failed (it is completed)."
                    )
                context.close()
                assert watched.errors == [], f"{scheme} {viewport}: errors in the browser:\n" + "\n".join(
                    watched.errors
                )
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        for name in DOCS_PICTURES:
            shutil.copyfile(ARTIFACTS / name, DOCS / name)


def _ask_for_every_matching_run(page: Any, base: str) -> None:
    """Filter, select the page, "Select all", choose the action."""
    page.goto(_list_url(base, FILTER))
    page.check("#action-toggle")
    page.click(".actions .question a")  # Django's "Select all N workflow runs"
    assert page.locator(".actions .all").is_visible()
    page.select_option("select[name=action]", "retry_failed_runs")
    page.click("button[name=index]")
    page.wait_for_load_state()


def _check_confirmation(page: Any, width: int) -> None:
    total = FAILED + COMPLETED + 1  # and the import-orders run the example project seeded, failed
    assert page.locator(".owf-question").inner_text() == (
        f"Retry all {total} runs matching the filter from the failed step? "
        "Completed steps keep their outputs and are not run again."
    )
    matching = page.locator(".owf-matching")
    assert f"Will change: {FAILED + 1} runs." in matching.inner_text()
    assert matching.locator("li").inner_text() == f"{COMPLETED} runs: it has not failed (it is completed)"
    assert page.locator(".owf-journal tbody tr").count() == 20
    assert f"… and {total - 20} more." in page.locator("#content-main").inner_text()
    # The page keeps the viewport's width (the table scrolls inside its box).
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    assert page.locator("input[name=owf_count]").get_attribute("value") == str(total)
    # The counts and the button stay within the page, readable, at every width.
    box = matching.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width
    button = page.locator("input[type=submit][value^='Yes']")
    assert button.evaluate(CONTRAST_JS) >= WCAG_AA
