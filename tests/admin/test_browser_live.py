"""Live pages in a real browser: the run page, the list and the dashboard change without a reload.

The example project of test_browser.py, served with a one-second interval
(``OPENWORKFLOW_ADMIN_LIVE_SECONDS``). The test process changes its database
the way an operator's colleagues would, through the package's own API in a
subprocess on the example project's settings: it starts runs, and a real
worker executes one to the end while its page is open. Each page must show
the change without being reloaded (a marker set on ``window`` survives),
keep a ticked row on the list through refreshes, and say it is live, paused
or finished, with no console error. The indicator is checked in light and
dark, at 1400 and 390 px.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.admin.test_browser import (
    NEEDS_CHROMIUM,
    PHONE,
    ROOT,
    WCAG_AA,
    WIDE,
    Watched,
    _contrast_problems,
    _list_url,
    chromium,
    example_admin,  # noqa: F401  # the fixture live_admin builds on
    log_in,
    server_problems,
    snapshot,
)
from tests.conftest import CEILING

# On every leg: it serves the suite's own kind of database (from a subprocess: marked so).
pytestmark = [NEEDS_CHROMIUM, pytest.mark.database]
WAIT_MS = 20_000  # a refresh comes every second; a loaded machine may take far longer to serve one


def example_database(tmp_path: Path) -> str:
    """The example project's database: a SQLite file, or beside the suite's PostgreSQL or MariaDB one a fresh one.

    With DATABASE_URL naming PostgreSQL or MariaDB (as the suite's legs on
    those databases set it), the project is served from ``<name>_browser_live_<worker>``
    on that server, dropped and created anew. The name is the xdist worker's own:
    test_browser_streams.py serves the same project from another worker at the
    same time, and a shared name let one test's DROP ... WITH (FORCE) cut the
    other's connections while it seeded.
    """
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres", "mysql")):
        return f"sqlite:///{tmp_path / 'example.sqlite3'}"
    parts = urllib.parse.urlsplit(url)
    name = parts.path.lstrip("/") + "_browser_live_" + os.environ.get("PYTEST_XDIST_WORKER", "main")
    if url.startswith("postgres"):
        import psycopg

        with psycopg.connect(parts._replace(path="/postgres", query="").geturl(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            connection.execute(f'CREATE DATABASE "{name}"')
        return parts._replace(path=f"/{name}").geturl()
    import MySQLdb

    connection = MySQLdb.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username or "root", passwd=parts.password or ""
    )
    try:
        cursor = connection.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    finally:
        connection.close()
    # The options the package's checks ask of MySQL and MariaDB (openworkflow.E020, W020).
    return parts._replace(path=f"/{name}", query="charset=utf8mb4&isolation_level=read%20committed").geturl()


@pytest.fixture
def live_admin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """test_browser.py's example project, refreshing its pages every second, on the suite's kind of database."""
    database = example_database(tmp_path)
    monkeypatch.setenv("OPENWORKFLOW_ADMIN_LIVE_SECONDS", "1")
    monkeypatch.setenv("OWF_EXAMPLE_DATABASE_URL", database)
    served: dict[str, Any] = request.getfixturevalue("example_admin")
    return {**served, "database": database}


def in_example_project(database: str, code: str) -> str:
    """Run ``code`` in a process on the example project's settings and database; what it prints."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DATABASE_URL": database,
        "OPENWORKFLOW_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }
    script = f"import django\ndjango.setup()\n{code}"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=ROOT, check=True, timeout=CEILING, capture_output=True, text=True
    )
    return done.stdout.strip()


START = (
    "from example_project.demo.workflows import onboard_user\n"
    "print(onboard_user.run({'user_id': 5, 'email': 'live@example.com', 'delay': '200ms'}).id)"
)
SLEEPER = START.replace("'200ms'", "'1h'")


def work(run_id: str, until: str) -> str:
    """A real worker that executes what is due until run ``run_id`` satisfies ``until`` (on ``run``, a handle)."""
    return (
        "from django_openworkflow import get_run\n"
        "from django_openworkflow.worker.loop import Worker\n"
        f"run = get_run({run_id!r})\n"
        f"Worker(poll_interval='50ms').run(until=lambda: {until}, install_signal_handlers=False)"
    )


def mark(page: Any) -> None:
    """A marker that a reload would wipe."""
    page.evaluate("() => { window.owfNotReloaded = true; }")


def not_reloaded(page: Any) -> bool:
    return bool(page.evaluate("() => window.owfNotReloaded === true"))


def blur(page: Any) -> None:
    page.evaluate("() => document.activeElement.blur()")


def live_text(page: Any) -> str:
    return str(page.locator(".owf-live-text").inner_text())


def test_pages_change_without_a_reload(live_admin: dict[str, Any]) -> None:
    base, database = live_admin["base"], live_admin["database"]
    with chromium() as browser:
        # The behaviour once, in light at 1400 px: it does not depend on the theme or the width. Each
        # change comes from another process (about a second each), so four passes would cost a minute.
        context = browser.new_context(viewport=WIDE, color_scheme="light")
        watched = Watched(context.new_page())
        log_in(watched.page, base)
        _run_page(watched.page, base, database, "light-1400")
        _run_list(watched.page, base, database, "light-1400")
        _dashboard(watched.page, base, database, "light-1400")
        context.close()
        assert watched.errors == [], "light-1400: errors in the browser:\n" + "\n".join(watched.errors)
        # How the indicator looks and works on each page, in the other themes and widths.
        run_id = in_example_project(database, SLEEPER)  # pending: its page polls
        for scheme, viewport in (("dark", WIDE), ("dark", PHONE), ("light", PHONE)):
            context = browser.new_context(viewport=viewport, color_scheme=scheme)
            watched = Watched(context.new_page())
            where = f"{scheme}-{viewport['width']}"
            log_in(watched.page, base)
            for name, path in (
                ("run", f"/admin/django_openworkflow/workflowrun/{run_id}/change/"),
                ("list", "/admin/django_openworkflow/workflowrun/?workflow=onboard-user"),
                ("dashboard", "/admin/django_openworkflow/workflowrun/dashboard/"),
            ):
                watched.page.goto(base + path)
                _indicator(watched.page, f"{where} {name}")
                snapshot(watched.page, f"live-{name}-{where}.png", full_page=True)
            context.close()
            assert watched.errors == [], f"{where}: errors in the browser:\n" + "\n".join(watched.errors)
        # Without JavaScript the pages are as served: the indicator stays hidden, nothing refreshes.
        context = browser.new_context(viewport=WIDE, java_script_enabled=False)
        page = context.new_page()
        log_in(page, base)
        assert page.locator(".owf-live").count() == 1 and not page.locator(".owf-live").is_visible()
        assert page.locator("#result_list tbody tr").count() >= 1
        context.close()
    problems = server_problems(live_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)


def _indicator(page: Any, where: str) -> None:
    """The indicator: visible, readable at AA contrast, its toggle working from the keyboard."""
    page.wait_for_function("() => /updated \\d+ s ago/.test(document.querySelector('.owf-live-text').textContent)")
    problems = _contrast_problems(page, ".owf-live-text") + _contrast_problems(page, ".owf-live-toggle")
    assert problems == [], f"{where}: live indicator under {WCAG_AA}:1 contrast:\n" + "\n".join(problems)
    toggle = page.locator(".owf-live-toggle")
    toggle.focus()
    page.keyboard.press("Enter")
    assert live_text(page) == "paused" and toggle.inner_text() == "Resume"
    page.keyboard.press("Space")
    assert toggle.inner_text() == "Pause"
    page.wait_for_function("() => /updated \\d+ s ago/.test(document.querySelector('.owf-live-text').textContent)")
    blur(page)


def wait_for_badge(page: Any, status: str) -> None:
    """Until the run page's title shows ``status``."""
    page.wait_for_function(
        "s => document.querySelector('.owf-title .owf-badge').textContent.trim() === s", arg=status, timeout=WAIT_MS
    )


def _run_page(page: Any, base: str, database: str, where: str) -> None:
    """A run's page follows it from pending to parked in a sleep to canceled, as a real worker moves it.

    The cancel confirmation the user opened stays open through the refresh
    that shows the run parked; the page stops once the run has finished.
    """
    run_id = in_example_project(database, SLEEPER)
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/{run_id}/change/")
    assert page.locator(".owf-title .owf-badge").inner_text() == "pending"
    _indicator(page, where)
    mark(page)
    page.click(".owf-action-cancel > summary")
    blur(page)
    in_example_project(database, work(run_id, "run.display_status() == 'parked'"))
    wait_for_badge(page, "parked")
    assert "wakes in" in page.locator(".owf-title").inner_text()
    assert page.locator(".owf-action-retry_now").count() == 1, "the actions changed with the run"
    assert page.locator(".owf-action-cancel").get_attribute("open") is not None, "what the user opened stays open"
    assert page.locator(".owf-journal tbody tr").count() >= 3

    in_example_project(database, f"from django_openworkflow import get_run\nget_run({run_id!r}).cancel()")
    in_example_project(database, work(run_id, "run.status() == 'canceled'"))
    wait_for_badge(page, "canceled")
    assert not_reloaded(page)
    assert page.locator(".owf-live").get_attribute("data-owf-live-state") == "finished"
    assert live_text(page) == "the run has finished: no more updates"
    snapshot(page, f"live-run-{where}.png", full_page=True)


def _run_list(page: Any, base: str, database: str, where: str) -> None:
    """A run started elsewhere appears; a ticked row holds the rows (not the counts) until it is unticked."""
    page.goto(_list_url(base, "?workflow=onboard-user&status=pending"))
    rows = page.locator("#result_list tbody tr")
    before = rows.count()
    _indicator(page, where)
    mark(page)
    in_example_project(database, START)
    page.wait_for_function(f"() => document.querySelectorAll('#result_list tbody tr').length === {before + 1}")
    assert page.locator(".owf-count-active .owf-count-number").inner_text() == str(before + 1)

    checkbox = page.locator("#result_list tbody input.action-select").first
    checkbox.check()
    ticked = checkbox.get_attribute("value")
    in_example_project(database, START)
    page.wait_for_function(
        "n => document.querySelector('.owf-count-active .owf-count-number').textContent.trim() === String(n)",
        arg=before + 2,
        timeout=WAIT_MS,
    )
    page.wait_for_function("() => document.querySelector('.owf-live-text').textContent.includes('held where')")
    assert rows.count() == before + 1, "a ticked row holds the rows"
    assert page.locator(f"#result_list input.action-select[value='{ticked}']").is_checked()
    snapshot(page, f"live-list-held-{where}.png", full_page=True)

    checkbox.uncheck()
    blur(page)  # the user moves on: the rows are free to change
    page.wait_for_function(f"() => document.querySelectorAll('#result_list tbody tr').length === {before + 2}")
    # Django's actions still work on the rows a refresh brought: select all, the counter.
    page.check("#action-toggle")
    assert page.locator("#result_list tbody input.action-select:checked").count() == before + 2
    assert page.locator(".action-counter").inner_text().startswith(f"{before + 2} of {before + 2}")
    page.uncheck("#action-toggle")
    assert not_reloaded(page)


def _dashboard(page: Any, base: str, database: str, where: str) -> None:
    """A run started elsewhere is counted among those due."""
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/dashboard/")
    due = page.locator(".owf-card", has_text="due, waiting for a worker").locator(".owf-card-number")
    before = int(due.inner_text())
    _indicator(page, where)
    mark(page)
    in_example_project(database, START)
    page.wait_for_function(
        "n => [...document.querySelectorAll('.owf-card')].some(card => "
        "card.textContent.includes('due, waiting for a worker') && "
        "card.querySelector('.owf-card-number').textContent.trim() === String(n))",
        arg=before + 1,
        timeout=WAIT_MS,
    )
    assert not_reloaded(page)
    snapshot(page, f"live-dashboard-{where}.png", full_page=True)
