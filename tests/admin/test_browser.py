"""The admin as users see it: the example project's themed admin in Debian's Chromium, driven by Playwright.

The example project (``example_project.settings``: django-admin-interface's
theme, LocaleMiddleware, ``i18n/``) runs in ``manage.py runserver`` on a
SQLite file of its own, seeded by :func:`seed_example_project` in a
subprocess: the demo's workflows plus a failing one and one with
200-character step names, worked by a real worker. The browser logs in
through the form, looks at the run list and the run pages in light and dark
colour schemes, at 1400 px with the navigation sidebar open and at 390 px,
cancels a parked run from its page and retries the failed one from the list.

Checked on every page: no console error, no failed request, and nothing on
the server's stderr but request lines (a Python warning, such as
django-admin-interface's "Language chooser requires Django's set_language
view", fails the test). Checked where it matters: every list column within
the page at 1400 px with the sidebar open, no column's text clipped at
390 px, the journal within the page with 200-character step names, and the
action buttons' text at WCAG AA contrast (4.5:1) in both schemes.

With OPENWORKFLOW_SCREENSHOTS=artifacts, pictures of the pages go to
``tests/artifacts/`` (git-ignored); with OPENWORKFLOW_SCREENSHOTS=docs
(``make screenshots``) the docs' pictures in ``docs/`` are refreshed too.
Skipped only when Playwright or Debian's Chromium (``chromium-headless-shell``
or ``chromium``) is missing, unless OPENWORKFLOW_REQUIRE_BROWSER is set (CI
sets it and installs both). Never downloads a browser.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import django
import pytest

from tests.admin.browser_checks import COLUMNS_JS, CONTRAST_JS, JOURNAL_JS
from tests.conftest import CEILING, built_once

# CI sets this: there a missing browser or Playwright is a failure, not a skip.
REQUIRE_BROWSER = bool(os.environ.get("OPENWORKFLOW_REQUIRE_BROWSER"))
if REQUIRE_BROWSER:
    from playwright import sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api")

ROOT = Path(__file__).resolve().parents[2]
# Debian's "old headless shell" (package chromium-headless-shell) when it is there, the build Playwright itself
# runs for headless pages: the same Blink as the browser without the desktop browser around it. Two of these
# tests used about a third less CPU with it (37-42 s against 55), and CI's legs are CPU-bound.
CHROMIUM_BUILDS = (Path("/usr/bin/chromium-headless-shell"), Path("/usr/bin/chromium"))
CHROMIUM = next((build for build in CHROMIUM_BUILDS if build.exists()), CHROMIUM_BUILDS[0])
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = ROOT / "tests" / "artifacts"
# Pictures of the pages: none unless asked for. OPENWORKFLOW_SCREENSHOTS=artifacts keeps them in tests/artifacts/
# (git-ignored) to look at; =docs (make screenshots) also refreshes the docs' pictures. A picture asserts
# nothing, and the full-page ones took about a tenth of these tests' CPU.
SCREENSHOTS = os.environ.get("OPENWORKFLOW_SCREENSHOTS", "")
DOCS = ROOT / "docs"
PASSWORD = "browser-test-pw"
LONG_STEP_LENGTH = 200
WIDE = {"width": 1400, "height": 900}
PHONE = {"width": 390, "height": 844}
WCAG_AA = 4.5

NEEDS_CHROMIUM = pytest.mark.skipif(
    not CHROMIUM.exists() and not REQUIRE_BROWSER,
    reason=f"needs Debian's Chromium at {' or '.join(map(str, CHROMIUM_BUILDS))}",
)
# The example project these tests serve is on a SQLite file whatever the suite's database, so on a
# PostgreSQL or MariaDB leg they would repeat the SQLite leg's tests exactly (a minute of each leg).
# They run there only under Django 6, whose admin differs and whose CI leg is PostgreSQL's.
# (test_browser_live.py serves the suite's own database: it runs on every leg.)
ONCE_PER_DJANGO = pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith(("postgres", "mysql")) and django.VERSION < (6, 0),
    reason="serves the example project on SQLite, as the SQLite leg's run does: Django 6 runs it on this leg",
)
pytestmark = [NEEDS_CHROMIUM, ONCE_PER_DJANGO]


# -- the example project, seeded and served --------------------------------------


def long_step_name(index: int) -> str:
    """A 200-character durable key with no space to break at, as generated keys can be."""
    stem = f"reconcile-invoice-{index}-customer-"
    return (stem + "0123456789abcdef-" * 20)[:LONG_STEP_LENGTH]


def seed_example_project() -> None:
    """Run in a subprocess on the example project's settings: a superuser, and runs in every state shown.

    The demo's onboarding (completed, with a child run whose first call
    failed), the same parked in a one-hour sleep, an expense claim waiting
    for a signal, a run that failed, one whose steps have 200-character
    names, and one whose step keeps failing (retrying, an hour's backoff).
    A worker in this process works them until each has finished or parked.
    """
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from django_openworkflow import RetryPolicy, workflow
    from django_openworkflow.worker.loop import Worker
    from example_project.demo.workflows import expense_approval, onboard_user

    get_user_model().objects.create_superuser("admin", "admin@example.com", PASSWORD)

    def parse_orders() -> None:
        raise ValueError("order 17: unknown currency 'XBT'")

    def charge_card() -> None:
        raise ConnectionError("payment gateway timed out")

    @workflow(
        name="charge-card",
        step_retry_policy=RetryPolicy(initial_interval="1h", maximum_interval="1h", maximum_attempts=10),
    )
    def charge_card_workflow(ctx: Any) -> None:
        ctx.step.run("charge", charge_card)

    @workflow(name="import-orders", version="2026.11-hotfix", step_retry_policy=RetryPolicy(maximum_attempts=1))
    def import_orders(ctx: Any) -> None:
        ctx.step.run("fetch-orders", lambda: {"orders": 17, "source": "sftp://erp.example.com/exports"})
        ctx.step.run("parse-orders", parse_orders)

    @workflow(name="reconcile-invoices", version="v1")
    def reconcile_invoices(ctx: Any) -> dict[str, int]:
        for index in range(3):
            ctx.step.run(long_step_name(index), lambda i=index: {"invoice": f"INV-{i:05d}", "matched": True})
        return {"reconciled": 3}

    completed = onboard_user.run({"user_id": 42, "email": "ada@example.com", "delay": "500ms"})
    sleeping = onboard_user.run({"user_id": 7, "email": "grace@example.com", "delay": "1h"})
    waiting = expense_approval.run({"employee": "ada", "amount": 120})
    failing = import_orders.run({"date": "2026-11-21"})
    long_names = reconcile_invoices.run({"month": "2026-10"})
    retrying = charge_card_workflow.run({"order": 17})

    def parked(handle: Any) -> bool:
        run = handle.fetch()
        return run.status == "running" and run.worker_id is None

    def settled() -> bool:
        finished = all(h.status() in ("completed", "failed") for h in (completed, failing, long_names))
        return finished and parked(sleeping) and parked(waiting) and parked(retrying)

    Worker(poll_interval="50ms").run(until=settled, install_signal_handlers=False)
    print(f"seeded: {completed.id} {sleeping.id} {waiting.id} {failing.id} {long_names.id} {retrying.id}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def example_env(database_url: str) -> dict[str, str]:
    """The environment of the example project's processes, on ``database_url``."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": database_url,
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }


def migrate_and_seed(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v", "0"],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=CEILING,
    )
    seed = "from tests.admin.test_browser import seed_example_project as s; s()"
    subprocess.run([sys.executable, "-c", seed], env=env, cwd=ROOT, check=True, timeout=CEILING)


def seeded_sqlite(tmp_path_factory: pytest.TempPathFactory, into: Path) -> None:
    """A copy at ``into`` of the example project's SQLite file, migrated and seeded once per session.

    Migrating and seeding cost about 2.5 s of CPU, and a dozen browser tests start from the
    same seeded file. The copy is SQLite's own backup, whole whatever the journal mode.
    """
    with built_once(tmp_path_factory, "example-seeded") as (base, built):
        template = base / "example-seeded.sqlite3"
        if not built:
            template.unlink(missing_ok=True)
            migrate_and_seed(example_env(f"sqlite:///{template}"))
    with closing(sqlite3.connect(template)) as source, closing(sqlite3.connect(into)) as target:
        source.backup(target)


@pytest.fixture
def example_admin(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The example project on a fresh SQLite file, migrated, seeded and served; yields its base URL and logs."""
    # A test may serve it from another database (test_browser_live.py: PostgreSQL, MariaDB).
    other = os.environ.get("OWF_EXAMPLE_DATABASE_URL")
    env = example_env(other or f"sqlite:///{tmp_path / 'example.sqlite3'}")
    if other:
        migrate_and_seed(env)
    else:
        seeded_sqlite(tmp_path_factory, tmp_path / "example.sqlite3")

    port = _free_port()
    stderr_path = tmp_path / "runserver.stderr"
    with stderr_path.open("w") as stderr:
        # -W default: every warning the server's code raises is printed (once per place), on stderr.
        server = subprocess.Popen(
            [sys.executable, "-W", "default", str(ROOT / "manage.py"), "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + CEILING
        while True:
            try:
                # The first answer loads the admin: seconds on a busy machine, so a slow one is waited for too.
                urllib.request.urlopen(f"{base}/admin/login/", timeout=CEILING).close()
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"runserver did not start:\n{stderr_path.read_text()}") from None
                time.sleep(0.1)
        yield {"base": base, "stderr": stderr_path, "env": env}
    finally:
        server.terminate()
        server.wait(10)


def seed_runs(example_admin: dict[str, Any], seeder: str) -> list[str]:
    """Call ``seeder`` (``"module:function"``) in a subprocess on the served project's database; its output, split."""
    module, function = seeder.split(":")
    seeded = subprocess.run(
        [sys.executable, "-c", f"from {module} import {function} as s; s()"],
        env=example_admin["env"],
        cwd=ROOT,
        check=True,
        timeout=CEILING,
        capture_output=True,
        text=True,
    )
    return seeded.stdout.split()


def server_problems(stderr: Path) -> list[str]:
    """What the server printed besides request lines for pages that were served (status < 400)
    and the broken pipes of connections the browser dropped."""
    problems = []
    for line in stderr.read_text().splitlines():
        request = re.match(r'^\[[^]]+\] "[A-Z]+ \S+ HTTP/[\d.]+" (\d{3}) ', line)
        if request and int(request.group(1)) < 400:
            continue
        if re.match(r"^\[[^]]+\] - Broken pipe from ", line):
            # The browser closed a connection it no longer needed (a page left
            # while a poll was in flight): the server did nothing wrong.
            continue
        problems.append(line)
    return problems


# -- the browser ------------------------------------------------------------------


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Debian Chromium."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"OPENWORKFLOW_REQUIRE_BROWSER is set but {' and '.join(map(str, CHROMIUM_BUILDS))} are missing "
            "(apt-get install chromium-headless-shell)"
        )
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def snapshot(target: Any, name: str, **options: Any) -> None:
    """A picture of ``target`` (a page or a locator) as tests/artifacts/``name``, when OPENWORKFLOW_SCREENSHOTS asks."""
    if SCREENSHOTS:
        ARTIFACTS.mkdir(exist_ok=True)
        target.screenshot(path=str(ARTIFACTS / name), **options)


class Watched:
    """A page whose console errors, uncaught exceptions and failed requests are recorded."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"))
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("requestfailed", self._request_failed)
        page.on("response", lambda r: r.status >= 400 and self.errors.append(f"HTTP {r.status}: {r.url}"))

    def _request_failed(self, request: Any) -> None:
        # A live page's refresh (live.js) cut short because the page was left: the browser's doing, not an error.
        if request.failure == "net::ERR_ABORTED" and request.headers.get("x-openworkflow-live") == "1":
            return
        self.errors.append(f"request failed: {request.url} {request.failure}")


def _list_url(base: str, query: str = "") -> str:
    return f"{base}/admin/django_openworkflow/workflowrun/{query}"


def _open_run(page: Any, base: str, workflow: str, status: str) -> None:
    """Open the run page of the only ``workflow`` run in ``status`` (a display status: parked counts)."""
    page.goto(_list_url(base, f"?workflow={workflow}&status={status}"))
    links = page.locator("#result_list tbody th a, #result_list tbody td.field-run_id a")
    assert links.count() == 1, f"expected one {status} {workflow} run"
    links.first.click()
    page.wait_for_load_state()


def _contrast_problems(page: Any, selector: str) -> list[str]:
    problems = []
    for index in range(page.locator(selector).count()):
        element = page.locator(selector).nth(index)
        if not element.is_visible():
            continue
        ratio = element.evaluate(CONTRAST_JS)
        if ratio < WCAG_AA:
            problems.append(f"{selector} {element.inner_text()!r}: {ratio:.2f}:1")
    return problems


def _sidebar_open(page: Any) -> bool:
    return bool(page.evaluate("() => document.querySelector('#main')?.classList.contains('shifted') ?? false"))


def test_the_themed_admin_in_a_real_browser(example_admin: dict[str, Any]) -> None:
    base = example_admin["base"]
    with chromium() as browser:
        for scheme in ("dark", "light"):  # light last: it also acts on the runs
            context = browser.new_context(viewport=WIDE, color_scheme=scheme)
            watched = Watched(context.new_page())
            _look(watched.page, base, scheme)
            if scheme == "light":
                _act(watched.page, base)
            context.close()
            assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        for name in ("run-list.png", "run-page.png", "dashboard.png"):
            shutil.copyfile(ARTIFACTS / f"readme-{name}", DOCS / name)


def log_in(page: Any, base: str, path: str = "/admin/django_openworkflow/workflowrun/", user: str = "admin") -> None:
    """Log in to the example project's admin as ``user`` (its superuser by default), and land on ``path``."""
    page.goto(f"{base}/admin/login/?next={path}")
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    # By the URL's path: the login page's own URL ends with ``path`` too (in ``?next=``), so a glob on
    # ``**{path}`` matched before the login went through, and on a busy machine the test read the login page.
    landing = urllib.parse.urlsplit(path).path
    page.wait_for_url(lambda url: urllib.parse.urlsplit(url).path == landing)


def _look(page: Any, base: str, scheme: str) -> None:
    """Log in, then check the list and the run pages in one colour scheme."""
    log_in(page, base)
    # The example project's theme is on (django-admin-interface marks the body).
    assert "admin-interface" in (page.locator("body").get_attribute("class") or "")

    # The list: every run, the counts, and every column readable.
    assert page.locator("#result_list tbody tr").count() == 7  # six seeded runs and the child run
    assert page.locator(".owf-count-parked .owf-count-number").inner_text() == "1"
    assert page.locator("#result_list .owf-status-failed").inner_text() == "failed"
    # A run stuck in retries and one waiting for a signal, each told from the list alone: badge, hint, error.
    retrying = page.locator("#result_list tbody tr", has=page.locator(".owf-status-retrying"))
    assert retrying.count() == 1 and "charge-card" in retrying.inner_text()
    assert page.locator(".owf-count-retrying .owf-count-number").inner_text() == "1"
    assert "step 'charge' · attempt 1 of 10 failed · next in" in retrying.inner_text()
    assert "ConnectionError: payment gateway timed out" in retrying.locator(".owf-error-cell").inner_text()
    waiting = page.locator("#result_list tbody tr", has=page.locator(".owf-status-waiting"))
    assert waiting.count() == 1 and "expense-approval" in waiting.inner_text()
    assert "waiting for signal 'manager-decision' · times out in" in waiting.inner_text()
    if not _sidebar_open(page):
        page.click("#toggle-nav-sidebar")
    assert _sidebar_open(page) and page.locator("#nav-sidebar").is_visible()
    snapshot(page, f"run-list-{scheme}.png", full_page=True)
    problems = page.evaluate(COLUMNS_JS, [WIDE["width"], True])
    assert problems == [], f"{scheme}, {WIDE['width']} px with the sidebar open:\n" + "\n".join(problems)
    page.set_viewport_size(PHONE)
    page.reload()
    snapshot(page, f"run-list-{scheme}-{PHONE['width']}.png", full_page=True)
    problems = page.evaluate(COLUMNS_JS, [PHONE["width"], False])
    assert problems == [], f"{scheme}, {PHONE['width']} px:\n" + "\n".join(problems)
    page.set_viewport_size(WIDE)
    if scheme == "light":
        docs_picture(page, "readme-run-list.png")

    # The journal with 200-character step names: within the page, at both widths.
    _open_run(page, base, "reconcile-invoices", "completed")
    assert page.locator(".owf-journal tbody tr").count() == 3
    assert len(page.locator(".owf-journal .owf-step-name code").first.inner_text()) == LONG_STEP_LENGTH
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"run-long-names-{scheme}-{viewport['width']}.png", full_page=True)
        problems = page.evaluate(JOURNAL_JS)
        assert problems == [], f"{scheme}, {viewport['width']} px, long step names:\n" + "\n".join(problems)
    page.set_viewport_size(WIDE)

    # The failed run: its error, and the actions at AA contrast, closed and open.
    _open_run(page, base, "import-orders", "failed")
    assert "ValueError: order 17: unknown currency 'XBT'" in page.locator(".owf-error").inner_text()
    assert "in parse_orders" in page.locator(".owf-raised-in").inner_text()  # the user's frame, first
    page.set_viewport_size(PHONE)
    error_top = page.locator(".owf-error").bounding_box()["y"]
    assert error_top < page.locator(".owf-summary").bounding_box()["y"], "on a phone the error comes first"
    snapshot(page, f"run-failed-{scheme}-{PHONE['width']}.png", full_page=True)
    page.set_viewport_size(WIDE)
    assert page.locator(".owf-action").count() >= 1
    problems = _contrast_problems(page, ".owf-action > summary")
    for index in range(page.locator(".owf-action").count()):
        page.locator(".owf-action > summary").nth(index).click()
        problems += _contrast_problems(page, ".owf-action[open] .owf-confirm")
        page.locator(".owf-action > summary").nth(index).click()
    assert problems == [], f"{scheme}: action buttons under {WCAG_AA}:1 contrast:\n" + "\n".join(problems)

    # The completed onboarding: the docs' picture, retries, the sleep, the child run.
    _open_run(page, base, "onboard-user", "completed")
    assert page.locator(".owf-tl-bar.owf-bar-sleep").count() == 1
    assert page.locator(".owf-journal tbody tr").count() >= 5
    snapshot(page, f"run-completed-{scheme}.png", full_page=True)
    if scheme == "light":
        docs_picture(page, "readme-run-page.png")
    page.locator(".owf-children a").first.click()
    page.wait_for_load_state()
    assert page.locator(".owf-tl-bar.owf-bar-failed").count() == 1  # the flaky call's first attempt

    # The parked runs: a sleep with its wake time, a signal wait with the send form on top, filled in.
    _open_run(page, base, "expense-approval", "waiting")
    assert page.locator(".owf-wait").count() == 1 and page.locator(".owf-send-signal").count() == 1
    assert page.locator(".owf-send-signal-top #id_name").input_value() == "manager-decision"
    problems = _contrast_problems(page, ".owf-action > summary")
    assert problems == [], f"{scheme}: action buttons under {WCAG_AA}:1 contrast:\n" + "\n".join(problems)
    snapshot(page, f"run-waiting-{scheme}.png", full_page=True)

    # The dashboard, from the run list's link: bars for what finished, a duration row per workflow.
    page.goto(_list_url(base))
    page.get_by_role("link", name="Dashboard").click()
    page.wait_for_url("**/workflowrun/dashboard/")
    chart = page.locator("svg.owf-chart").first
    assert chart.is_visible() and chart.locator("rect.owf-chart-completed").count() >= 1
    assert chart.locator("rect.owf-chart-failed").count() >= 1
    assert page.locator(".owf-legend").first.is_visible()
    assert page.locator(".owf-duration-row rect.owf-chart-p95").count() >= 3  # one per workflow
    problems = _contrast_problems(page, ".owf-card-number") + _contrast_problems(page, ".owf-card-label")
    assert problems == [], f"{scheme}: dashboard text under {WCAG_AA}:1 contrast:\n" + "\n".join(problems)
    snapshot(page, f"dashboard-{scheme}.png", full_page=True)
    if scheme == "light":
        docs_picture(page, "readme-dashboard.png")


def docs_picture(page: Any, name: str, viewport: dict[str, int] | None = None) -> None:
    """A docs picture, when OPENWORKFLOW_SCREENSHOTS asks: the page at ``viewport`` (1280 px), no app sidebar."""
    if not SCREENSHOTS:
        return
    was_open = _sidebar_open(page)
    if was_open:
        page.click("#toggle-nav-sidebar")
    page.set_viewport_size(viewport or {"width": 1280, "height": 800})
    snapshot(page, name, full_page=True)
    page.set_viewport_size(WIDE)
    if was_open:
        page.click("#toggle-nav-sidebar")


def _act(page: Any, base: str) -> None:
    """Cancel the sleeping run from its page; retry the failed one from the list."""
    _open_run(page, base, "onboard-user", "parked")
    assert "wakes in" in page.locator(".owf-title").inner_text()
    page.click(".owf-action-cancel > summary")
    snapshot(page, "run-cancel-confirm.png")
    page.click(".owf-action-cancel button[type=submit]")
    page.wait_for_load_state()
    assert page.locator(".messagelist .success").inner_text() == "Canceled: 1 run."
    assert page.locator(".owf-title .owf-badge").inner_text() == "canceled"

    page.goto(_list_url(base, "?status=failed"))
    page.check("#result_list tbody input.action-select")
    page.select_option("select[name=action]", "retry_failed_runs")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert "Retry the 1 selected run from the failed step?" in page.locator(".owf-question").inner_text()
    snapshot(page, "list-action-confirm.png", full_page=True)
    page.click("input[type=submit][value^='Yes']")
    page.wait_for_load_state()
    assert page.locator(".messagelist .success").inner_text() == "Sent back to pending: 1 run."
    page.goto(_list_url(base, "?status=pending"))
    assert page.locator("#result_list .owf-status-pending").count() == 1
