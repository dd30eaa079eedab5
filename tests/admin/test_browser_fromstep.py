"""Re-run from a step in a real browser: the journal's link, the confirmation, the new run's page.

On the example project served by test_browser.py's ``example_admin`` (the
demo's completed onboarding run: two steps, a sleep, then a step and a
child run), in light and dark colour schemes, at 1400 px and 390 px: no
console error, no failed request, nothing on the server's stderr, the
journal within the page. A real worker (``runworkflows --burst`` on the
same SQLite file) runs the re-run. With OPENWORKFLOW_SCREENSHOTS=docs the
docs' two pictures are refreshed (``docs/rerun-from-step-*.png``, from the light pass).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from tests.admin.browser_checks import JOURNAL_JS
from tests.admin.test_browser import (  # noqa: F401 (example_admin: a fixture, pytestmark: skip without a browser)
    ARTIFACTS,
    DOCS,
    PASSWORD,
    PHONE,
    ROOT,
    WIDE,
    Watched,
    _open_run,
    chromium,
    docs_picture,
    example_admin,
    log_in,
    pytestmark,
    server_problems,
    snapshot,
)
from tests.conftest import CEILING

STEP = "send-tips-email"


@contextmanager
def worker(tmp_path: Path) -> Iterator[None]:
    """A worker process on the example project's SQLite file while the block runs (the re-run and its child)."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'example.sqlite3'}",
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    command = [sys.executable, str(ROOT / "manage.py"), "runworkflows", "--poll", "50ms"]
    process = subprocess.Popen(command, env=env, cwd=ROOT)
    try:
        yield
    finally:
        process.terminate()
        process.wait(30)


def wait_for_badge(page: Any, status: str, timeout: float = CEILING) -> None:
    """Reload the run page until its status badge reads ``status``."""
    give_up = time.monotonic() + timeout
    while page.locator(".owf-title .owf-badge").inner_text() != status:
        assert time.monotonic() < give_up, f"the run is not {status} after {timeout:g}s"
        time.sleep(0.2)
        page.reload()


def test_rerun_from_a_step_in_a_real_browser(example_admin: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    base = example_admin["base"]
    runs: dict[str, str] = {}  # the source run's page and the re-run's, once the light pass made it
    with chromium() as browser:
        for scheme in ("light", "dark"):
            context = browser.new_context(viewport=WIDE, color_scheme=scheme)
            watched = Watched(context.new_page())
            page = watched.page
            if scheme == "light":
                log_in(page, base)
                context.storage_state(path=str(tmp_path / "state.json"))
            else:
                context.close()
                context = browser.new_context(
                    viewport=WIDE, color_scheme=scheme, storage_state=str(tmp_path / "state.json")
                )
                watched = Watched(context.new_page())
                page = watched.page
            _look_and_rerun(page, base, scheme, tmp_path, runs)
            context.close()
            assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "readme-rerun-confirm-light.png", DOCS / "rerun-from-step-confirm.png")
        shutil.copyfile(ARTIFACTS / "readme-rerun-new-run-light.png", DOCS / "rerun-from-step-run.png")


def _look_and_rerun(page: Any, base: str, scheme: str, tmp_path: Path, runs: dict[str, str]) -> None:
    """The light pass re-runs the completed onboarding from STEP; the dark one looks at the same pages."""
    if "source" in runs:
        page.goto(runs["source"])
    else:
        _open_run(page, base, "onboard-user", "completed")
        runs["source"] = page.url
    source_url = runs["source"]
    rows = page.locator(".owf-journal tbody tr")
    # Every step up to the child's is a starting point: the child's own step starts a new child.
    offered = [
        rows.nth(i).locator(".owf-step-name code").first.inner_text()
        for i in range(rows.count())
        if rows.nth(i).locator(".owf-rerun-from a").count()
    ]
    assert STEP in offered and "create-account" in offered and "welcome-delay" in offered
    tips_row = page.locator(".owf-journal tbody tr", has=page.locator(f"code:text-is('{STEP}')")).first
    tips_row.locator(".owf-rerun-from a").click()
    page.wait_for_load_state()
    assert f"whose steps before '{STEP}' keep the results recorded in that run" in page.inner_text(".owf-question")
    copied = page.locator(".owf-rerun-from-page .owf-journal tbody tr .owf-step-name code")
    assert [copied.nth(i).inner_text() for i in range(copied.count())] == [
        "create-account",
        "send-welcome-email",
        "welcome-delay",
    ]
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"rerun-confirm-{scheme}-{viewport['width']}.png", full_page=True)
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= viewport["width"], f"{scheme}, {viewport['width']} px: the confirmation is {width} px wide"
    page.set_viewport_size(WIDE)
    docs_picture(page, f"readme-rerun-confirm-{scheme}.png")
    if "rerun" in runs:
        page.goto(runs["rerun"])
    else:
        page.click("input[type=submit][value^='Yes']")
        page.wait_for_load_state()
        assert "the steps before it were copied from run" in page.locator(".messagelist .success").inner_text()
        runs["rerun"] = page.url
        with worker(tmp_path):
            wait_for_badge(page, "completed")
    assert f"from step {STEP}: the steps before it were copied" in page.locator(".owf-rerun-of").inner_text()
    assert page.locator(".owf-journal tbody tr.owf-copied-row").count() == 3
    source_path = urlparse(source_url).path
    assert page.locator(".owf-copied a").first.get_attribute("href").startswith(f"{source_path}#attempt-")
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"rerun-new-run-{scheme}-{viewport['width']}.png", full_page=True)
        problems = page.evaluate(JOURNAL_JS)
        assert problems == [], f"{scheme}, {viewport['width']} px, the re-run's journal:\n" + "\n".join(problems)
    page.set_viewport_size(WIDE)
    docs_picture(page, f"readme-rerun-new-run-{scheme}.png")
    # The source run lists its re-runs.
    page.goto(source_url)
    assert page.locator(".owf-reruns a").count() >= 1
