"""The admin in a real browser: Debian's Chromium driven by Playwright against a live server.

Logs in through the login form, looks at the run list and at a completed,
a failed and a sleeping run, cancels the sleeping run from its page and
retries the failed one from the list, and saves screenshots under
``tests/artifacts/`` (git-ignored). Skipped only when Playwright or
``/usr/bin/chromium`` is missing, unless OPENWORKFLOW_REQUIRE_BROWSER is set
(CI sets it and installs both). Never downloads a browser.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.test.testcases import LiveServerThread

from django_openworkflow import RetryPolicy, workflow
from django_openworkflow.models import WorkflowRun
from django_openworkflow.registry import registry
from tests.testapp.models import SideEffect
from tests.testapp.workflows import always_fails, sleeper, three_steps

# CI sets this: there a missing browser or Playwright is a failure, not a skip.
REQUIRE_BROWSER = bool(os.environ.get("OPENWORKFLOW_REQUIRE_BROWSER"))
if REQUIRE_BROWSER:
    from playwright import sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path("/usr/bin/chromium")
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
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
PASSWORD = "browser-test-pw"

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists() and not REQUIRE_BROWSER, reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def live_admin(settings: Any) -> Iterator[str]:
    """A live server that serves the admin's static files; yields its base URL.

    pytest-django's ``live_server`` needs STATIC_URL (and the staticfiles app
    for CSS), which the test settings do not set; this server gets both from
    here, and the finders read static files from each app's static/ folder.
    """
    settings.STATIC_URL = "/static/"
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "localhost"]
    thread = LiveServerThread("localhost", static_handler=StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error is not None:
        raise thread.error
    try:
        yield f"http://localhost:{thread.port}"
    finally:
        thread.terminate()


def _signup(ctx: Any) -> dict[str, Any]:
    """A run with a retry and a sleep: what the README's screenshot shows."""

    def send_welcome() -> str:
        SideEffect.objects.create(run_id=ctx.run_id, step="send-welcome-email")
        if SideEffect.objects.filter(run_id=ctx.run_id, step="send-welcome-email").count() == 1:
            raise ConnectionError("SMTP server timed out after 0.3 s")
        return "<welcome.3f9a1c@mail.example.com>"

    account = ctx.step.run("create-account", lambda: {"user_id": ctx.input["user_id"], "plan": "trial"})
    message = ctx.step.run(
        "send-welcome-email", send_welcome, retry_policy=RetryPolicy(initial_interval="600ms", maximum_attempts=3)
    )
    ctx.step.sleep("welcome-delay", "1500ms")
    tips = ctx.step.run("send-tips-email", lambda: "<tips.77b2e0@mail.example.com>")
    return {"user_id": account["user_id"], "emails": [message, tips]}


@pytest.fixture
def signup_workflow() -> Iterator[Any]:
    spec = workflow(name="signup", version="v2")(_signup)
    yield spec
    registry.unregister("signup", "v2")


@contextmanager
def chromium_page() -> Iterator[Any]:
    """A page in headless Chromium.

    Playwright's sync API runs an event loop in this thread, and Django
    refuses ORM calls while one runs: the test does its database work before
    and after this block, never inside it.
    """
    if not CHROMIUM.exists():
        pytest.fail("OPENWORKFLOW_REQUIRE_BROWSER is set but /usr/bin/chromium is missing (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser.new_page(viewport={"width": 1440, "height": 900})
        finally:
            browser.close()


def _run_url(base: str, run_id: Any) -> str:
    return f"{base}/admin/django_openworkflow/workflowrun/{run_id}/change/"


def test_admin_in_a_real_browser(
    live_admin: str,
    django_user_model: Any,
    run_worker: Any,
    signup_workflow: Any,
) -> None:
    django_user_model.objects.create_superuser("admin", "admin@example.com", PASSWORD)
    completed = three_steps.run({"start": 4})
    failed = always_fails.run({"order": 17})
    sleeping = sleeper.run({"duration": "1h"})
    signup = signup_workflow.run({"user_id": 42, "email": "ada@example.com"}, idempotency_key="signup-42")
    run_worker(until=lambda: signup.status() == "completed" and sleeping.fetch().worker_id is None)
    assert (completed.status(), failed.status(), sleeping.status()) == ("completed", "failed", "running")

    ARTIFACTS.mkdir(exist_ok=True)
    base = live_admin
    with chromium_page() as page:
        _drive(page, base, completed.id, failed.id, sleeping.id, signup.id)
    assert WorkflowRun.objects.get(id=sleeping.id).status == "canceled"
    assert WorkflowRun.objects.get(id=failed.id).status == "pending"


def _drive(page: Any, base: str, completed: Any, failed: Any, sleeping: Any, signup: Any) -> None:
    """Everything the browser does; no ORM calls in here (see chromium_page)."""
    # Log in through the form.
    page.goto(f"{base}/admin/login/?next=/admin/django_openworkflow/workflowrun/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/django_openworkflow/workflowrun/")

    # The list: badges, counts, and the admin's stylesheet really applied.
    assert page.locator("#result_list tbody tr").count() == 4
    assert page.locator(".owf-count-parked .owf-count-number").inner_text() == "1"
    assert page.locator("#result_list .owf-status-failed").inner_text() == "failed"
    badge_colour = page.locator("#result_list .owf-status-completed").first.evaluate(
        "e => getComputedStyle(e).backgroundColor"
    )
    assert badge_colour == "rgb(26, 127, 55)"
    page.screenshot(path=str(ARTIFACTS / "run-list.png"), full_page=True)

    # Each kind of run page.
    for name, run_id in (("completed", completed), ("failed", failed), ("sleeping", sleeping), ("signup", signup)):
        page.goto(_run_url(base, run_id))
        assert page.locator(".owf-journal tbody tr").count() >= 1
        assert page.locator(".owf-tl-bar").count() >= 1
        page.screenshot(path=str(ARTIFACTS / f"run-{name}.png"), full_page=True)
    page.goto(_run_url(base, failed))
    assert "ValueError: kaboom" in page.locator(".owf-error").inner_text()
    page.goto(_run_url(base, signup))
    assert page.locator(".owf-tl-bar.owf-bar-failed").count() == 1
    assert page.locator(".owf-tl-bar.owf-bar-sleep").count() == 1
    page.emulate_media(color_scheme="dark")
    page.screenshot(path=str(ARTIFACTS / "run-signup-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    # The README's picture (docs/run-page.png is a copy): the page alone, without the app sidebar.
    page.click("#toggle-nav-sidebar")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.screenshot(path=str(ARTIFACTS / "readme-run-page.png"), full_page=True)
    page.click("#toggle-nav-sidebar")
    page.set_viewport_size({"width": 1440, "height": 900})

    # Cancel the sleeping run from its page: open the action, confirm.
    page.goto(_run_url(base, sleeping))
    assert "wakes in" in page.locator(".owf-title").inner_text()
    page.click(".owf-action-cancel > summary")
    page.screenshot(path=str(ARTIFACTS / "run-cancel-confirm.png"))
    page.click(".owf-action-cancel button[type=submit]")
    page.wait_for_load_state()
    assert page.locator(".messagelist .success").inner_text() == "Canceled: 1 run."
    assert page.locator(".owf-title .owf-badge").inner_text() == "canceled"
    page.screenshot(path=str(ARTIFACTS / "run-canceled.png"), full_page=True)

    # Retry the failed run from the list: select it, pick the action, confirm.
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/?status=failed")
    page.check("#result_list tbody input.action-select")
    page.select_option("select[name=action]", "retry_failed_runs")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert "Retry the 1 selected run from the failed step?" in page.locator(".owf-question").inner_text()
    page.screenshot(path=str(ARTIFACTS / "list-action-confirm.png"), full_page=True)
    page.click("input[type=submit][value^='Yes']")
    page.wait_for_load_state()
    assert page.locator(".messagelist .success").inner_text() == "Sent back to pending: 1 run."
