"""An object's workflow runs on its own admin page, in a real browser (``WorkflowRunsMixin``).

The example project of ``test_browser.py`` registers Django's user admin
with the mixin (``example_project/demo/admin.py``). A user gets runs of the
demo's onboarding (one completed, one asleep), an expense claim waiting for
a signal and an import that failed, all started with ``subject=user`` and
worked by a real worker; another user gets one run. The user's page lists
exactly that user's runs, with their statuses, the error and the actions,
in light and dark colour schemes, at 1400 and 390 px; its link opens the
run list filtered to the user, and a run's page links back to the user.

Screenshots go to ``tests/artifacts/``; with OPENWORKFLOW_SCREENSHOTS=docs
the docs' ``subject-runs.png`` is refreshed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
    PHONE,
    SCREENSHOTS,
    WIDE,
    Watched,
    _sidebar_open,
    chromium,
    example_admin,  # noqa: F401  (the fixture)
    log_in,
    pytestmark,  # noqa: F401  (skipped without Chromium)
    seed_runs,
    server_problems,
    snapshot,
)


def seed_subject_runs() -> None:
    """Run in a subprocess on the example project's database: two users and their runs, worked until settled."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from django_openworkflow import RetryPolicy, workflow
    from django_openworkflow.worker.loop import Worker
    from example_project.demo.workflows import expense_approval, onboard_user

    users = get_user_model().objects
    ada = users.create_user("ada", "ada@example.com", "pw")
    grace = users.create_user("grace", "grace@example.com", "pw")

    def parse_orders() -> None:
        raise ValueError("order 17: unknown currency 'XBT'")

    @workflow(name="import-user-orders", step_retry_policy=RetryPolicy(maximum_attempts=1))
    def import_user_orders(ctx: Any) -> None:
        ctx.step.run("parse-orders", parse_orders)

    handles = [
        onboard_user.run({"user_id": ada.pk, "email": ada.email, "delay": "200ms"}, subject=ada),
        onboard_user.run({"user_id": ada.pk, "email": ada.email, "delay": "1h"}, subject=ada),
        expense_approval.run({"employee": "ada", "amount": 120}, subject=ada),
        import_user_orders.run({"date": "2026-11-21"}, subject=ada),
    ]
    onboard_user.run({"user_id": grace.pk, "email": grace.email, "delay": "1h"}, subject=grace)

    def settled() -> bool:
        done, asleep, waiting, failed = (handle.fetch() for handle in handles)
        parked = all(run.status == "running" and run.worker_id is None for run in (asleep, waiting))
        return done.status == "completed" and failed.status == "failed" and parked

    Worker(poll_interval="50ms").run(until=settled, install_signal_handlers=False)
    print(" ".join(str(handle.id) for handle in handles))


def test_a_users_runs_on_the_users_page(example_admin: dict[str, Any]) -> None:  # noqa: F811
    base = example_admin["base"]
    ada_runs = set(seed_runs(example_admin, "tests.admin.test_browser_subjects:seed_subject_runs"))
    assert len(ada_runs) == 4
    with chromium() as browser:
        for scheme in ("dark", "light"):
            context = browser.new_context(viewport=WIDE, color_scheme=scheme)
            watched = Watched(context.new_page())
            _visit(watched.page, base, scheme, ada_runs)
            context.close()
            assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "docs-subject-runs.png", DOCS / "subject-runs.png")


def _visit(page: Any, base: str, scheme: str, ada_runs: set[str]) -> None:
    log_in(page, base, "/admin/auth/user/")
    page.locator("#result_list a", has_text="ada").first.click()
    page.wait_for_url("**/admin/auth/user/*/change/")
    section = page.locator("#owf-subject-runs")
    rows = section.locator("tr.owf-subject-run")
    assert {rows.nth(i).get_attribute("data-run-id") for i in range(rows.count())} == ada_runs
    text = " ".join(section.text_content().split())  # as written, not as the theme's CSS capitalises it
    assert "4 runs" in text and "ValueError: order 17: unknown currency 'XBT'" in text
    assert "waiting" in text and "completed" in text, text
    assert section.locator(".owf-subject-action", has_text="Cancel").count() == 2  # the unfinished runs
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"subject-runs-{scheme}-{viewport['width']}.png", full_page=True)
    page.set_viewport_size(WIDE)
    if scheme == "light":
        _docs_picture(page, section)
    # The run list of all the user's runs, and from a run's page back to the user.
    section.locator(".owf-subject-all a").click()
    page.wait_for_url("**/workflowrun/?subject=auth.user*")
    assert page.locator("#result_list tbody tr").count() == 4
    page.locator("#result_list tbody tr").first.locator("th a, td.field-run_id a").first.click()
    page.wait_for_url("**/workflowrun/*/change/**")  # with the list's filters kept in its query
    page.locator("a.owf-subject").click()
    page.wait_for_url("**/admin/auth/user/*/change/")
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/?subject=auth.user:1")  # the admin's own user: none
    assert page.locator("#result_list tbody tr").count() == 0


def _docs_picture(page: Any, section: Any) -> None:
    """The docs' picture (when OPENWORKFLOW_SCREENSHOTS asks): the section and the form's end above it, 1280 px wide."""
    if not SCREENSHOTS:
        return
    if _sidebar_open(page):
        page.click("#toggle-nav-sidebar")
    # The whole page in the window: the form's sticky buttons then sit at its end, not over the section.
    page.set_viewport_size({"width": 1280, "height": 800})
    height = int(page.evaluate("document.documentElement.scrollHeight"))
    page.set_viewport_size({"width": 1280, "height": height})
    box = section.bounding_box()
    top = max(0, box["y"] - 260)
    clip = {"x": 0, "y": top, "width": 1280, "height": box["y"] + box["height"] - top + 10}
    snapshot(page, "docs-subject-runs.png", clip=clip)
    page.set_viewport_size(WIDE)
    page.click("#toggle-nav-sidebar")
