"""The workflow page and the dashboard in a real browser: light and dark, 1400 px and 390 px.

The example project of ``test_browser.py`` (django-admin-interface's theme,
a real worker's runs: a failed ``import-orders``, a retrying
``charge-card``, a waiting expense claim ...). Checked on each page, in each
scheme and width: no console error and no failed request, nothing on the
server's stderr, no sideways scrolling, and every piece of text at least
11 px (the charts' labels included: they are HTML, not text in a scaled
SVG). The dashboard's tiles lead to the runs they count; the workflow page
is reached from the run list's workflow column.

Screenshots go to ``tests/artifacts/``; with OPENWORKFLOW_SCREENSHOTS=docs
the docs' ``workflow-page.png`` and ``dashboard-phone.png`` are refreshed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
    PHONE,
    WIDE,
    Watched,
    _contrast_problems,
    _sidebar_open,
    chromium,
    docs_picture,
    example_admin,  # noqa: F401  (the fixture)
    log_in,
    pytestmark,  # noqa: F401  (skipped without Chromium)
    server_problems,
    snapshot,
)

MIN_TEXT_PX = 11

# Runs in the page: what scrolls sideways, sticks out of the window, or is written smaller than MIN_TEXT_PX.
READABLE_JS = """
minPx => {
    const problems = [];
    if (document.documentElement.scrollWidth > window.innerWidth + 1)
        problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px in ${window.innerWidth}`);
    for (const el of document.querySelectorAll('#content-main *')) {
        const tag = el.tagName.toLowerCase();
        const name = `${tag}.${el.className.baseVal ?? el.className}`;
        if (el.closest('svg')) {
            if (tag === 'text') problems.push(`${name}: text drawn inside an SVG scales with it`);
            continue;
        }
        const box = el.getBoundingClientRect();
        if (!box.width || !box.height || el.closest('thead[style], .owf-failures thead') && box.width <= 1) continue;
        const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
        if (own && parseFloat(getComputedStyle(el).fontSize) < minPx)
            problems.push(`${name} "${el.textContent.trim().slice(0, 30)}": ${getComputedStyle(el).fontSize}`);
        if (box.right > window.innerWidth + 1 && !el.closest('[style*="overflow"], .owf-table-wrap'))
            problems.push(`${name} "${el.textContent.trim().slice(0, 30)}" ends at ${Math.round(box.right)} px`);
    }
    return problems;
}
"""


def _base_list(base: str, query: str = "") -> str:
    return f"{base}/admin/django_openworkflow/workflowrun/{query}"


def _check(page: Any, what: str) -> None:
    problems = page.evaluate(READABLE_JS, MIN_TEXT_PX)
    assert problems == [], f"{what}:\n" + "\n".join(problems)


def test_the_workflow_page_and_the_dashboard_in_a_real_browser(example_admin: dict[str, Any]) -> None:  # noqa: F811
    base = example_admin["base"]
    with chromium() as browser:
        for scheme in ("dark", "light"):
            context = browser.new_context(viewport=WIDE, color_scheme=scheme)
            watched = Watched(context.new_page())
            _visit(watched.page, base, scheme)
            context.close()
            assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        for name in ("workflow-page.png", "dashboard-phone.png"):
            shutil.copyfile(ARTIFACTS / f"docs-{name}", DOCS / name)


def _visit(page: Any, base: str, scheme: str) -> None:
    log_in(page, base)
    if not _sidebar_open(page):
        page.click("#toggle-nav-sidebar")

    # From the run list's workflow column to the failed workflow's page.
    page.locator("#result_list td.field-workflow a", has_text="import-orders").first.click()
    page.wait_for_url("**/workflowrun/workflow/import-orders/")
    assert page.locator(".owf-card-failed .owf-card-number").inner_text().strip() == "1"
    assert "ValueError: order 17: unknown currency 'XBT'" in page.locator(".owf-failures").inner_text()
    assert page.locator(".owf-p50").inner_text() not in ("", "-")
    # Declared only in the seeding process, not in the server's: said, and no start form.
    assert "not registered" in page.locator(".owf-summary").inner_text()
    assert page.locator("#owf-start-form").count() == 0
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"workflow-page-{scheme}-{viewport['width']}.png", full_page=True)
        _check(page, f"workflow page, {scheme}, {viewport['width']} px")
    page.set_viewport_size(WIDE)
    assert not _contrast_problems(page, ".owf-card-number") and not _contrast_problems(page, ".owf-card-label")
    if scheme == "light":
        docs_picture(page, "docs-workflow-page.png", {"width": 1280, "height": 800})
    # Its failures' card leads to the failed run in the list.
    page.click(".owf-card-failed")
    page.wait_for_load_state()
    assert page.locator("#result_list tbody tr").count() == 1
    assert "import-orders" in page.locator("#result_list tbody tr").inner_text()

    # A workflow the server has registered: its start form, with its one version.
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/workflow/onboard-user/")
    assert page.locator("#owf-start-form select[name=workflow] option").count() == 1
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"workflow-start-{scheme}-{viewport['width']}.png", full_page=True)
        _check(page, f"workflow page with its start form, {scheme}, {viewport['width']} px")
    page.set_viewport_size(WIDE)

    # The dashboard: a free range, readable at both widths, its tiles lead to what they count.
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/dashboard/")
    page.fill(".owf-range-hours-form input[name=hours]", "48")
    page.click(".owf-range-hours-form button")
    page.wait_for_url("**/dashboard/?hours=48")
    assert page.locator(".owf-range-shown").inner_text().startswith("Runs that finished in the last 2 days")
    for viewport in (WIDE, PHONE):
        page.set_viewport_size(viewport)
        snapshot(page, f"dashboard-range-{scheme}-{viewport['width']}.png", full_page=True)
        _check(page, f"dashboard, {scheme}, {viewport['width']} px")
    page.set_viewport_size(WIDE)
    if scheme == "light":
        docs_picture(page, "docs-dashboard-phone.png", PHONE)
    retrying = page.locator(".owf-card-retrying .owf-card-number").inner_text().strip()
    page.click(".owf-card-retrying")
    page.wait_for_load_state()
    assert retrying == "1" and page.locator("#result_list tbody tr").count() == 1
    page.go_back()
    finished = int(page.locator(".owf-card-finished .owf-card-number").inner_text())
    page.click(".owf-card-finished")
    page.wait_for_load_state()
    assert page.locator("#result_list tbody tr").count() == finished
    # The list's own range filter shows the range the tile gave it, and no error.
    assert page.locator(".messagelist .error").count() == 0
    assert page.locator("input[type=datetime-local][name=finished_from]").input_value() != ""

    # A bad range is said, not a failure.
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/dashboard/?from=yesterday")
    assert "is not a date and time" in page.locator(".owf-range-error").inner_text()
