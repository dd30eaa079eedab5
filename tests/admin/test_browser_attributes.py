"""The run list filtered by typed attributes, in a real browser (``AttributeFilter``, docs/howto/attributes.md).

The example project's ``send-invoice`` declares ``customer_id``, ``region``,
``amount`` and ``due``. Invoices of amounts and due dates whose text order
is not their order are worked by a real worker; the *By attribute* form
then narrows the list to the invoices of at least 1,000 EUR, and to those
in the EU: each step shows exactly those runs, and × removes a filter.
A run's page lists its attributes.

Screenshots go to ``tests/artifacts/``; with OPENWORKFLOW_SCREENSHOTS=docs
the docs' ``run-list-attributes.png`` is refreshed.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from tests.admin.test_browser import (
    ARTIFACTS,
    DOCS,
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

INVOICES = [  # customer, amount, due (ISO, various offsets), region
    (9, "950.00", "2026-12-04T10:00:00+01:00", "eu"),
    (10, "1250.00", "2026-12-04T04:00:00-05:00", "eu"),
    (11, "10400.50", "2026-12-11T09:00:00+00:00", "us"),
    (12, "99.90", "2026-12-01T09:00:00+00:00", "eu"),
    (13, "2000.00", "2026-11-30T18:00:00+09:00", "apac"),
    (14, "1000.00", "2026-12-18T09:00:00+01:00", "eu"),
]


def seed_invoices() -> None:
    """Run in a subprocess on the example project's database: the invoices, worked until they finish."""
    from datetime import datetime
    from decimal import Decimal

    import django

    django.setup()
    from django_openworkflow.worker.loop import Worker
    from example_project.demo.workflows import send_invoice

    handles = [
        send_invoice.run(
            {"email": f"customer-{customer}@example.com", "region": region},
            attributes={"customer_id": customer, "amount": Decimal(amount), "due": datetime.fromisoformat(due)},
        )
        for customer, amount, due, region in INVOICES
    ]
    Worker(poll_interval="50ms").run(
        until=lambda: all(handle.status() == "completed" for handle in handles), install_signal_handlers=False
    )
    print(" ".join(str(handle.id) for handle in handles))


def test_the_run_list_filtered_by_attributes(example_admin: dict[str, Any]) -> None:  # noqa: F811
    base = example_admin["base"]
    run_ids = seed_runs(example_admin, "tests.admin.test_browser_attributes:seed_invoices")
    assert len(run_ids) == len(INVOICES)
    by_customer = dict(zip((customer for customer, *_ in INVOICES), run_ids, strict=True))
    with chromium() as browser:
        context = browser.new_context(viewport=WIDE, color_scheme="light")
        watched = Watched(context.new_page())
        _visit(watched.page, base, by_customer)
        context.close()
        assert watched.errors == [], "errors in the browser:\n" + "\n".join(watched.errors)
    problems = server_problems(example_admin["stderr"])
    assert problems == [], "the server printed:\n" + "\n".join(problems)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "docs-run-list-attributes.png", DOCS / "run-list-attributes.png")


def _shown(page: Any) -> set[str]:
    rows = page.locator("#result_list tbody tr")
    return {
        rows.nth(i).locator("td.field-run_id code, th.field-run_id code").first.get_attribute("title")
        for i in range(rows.count())
    }


def _add_filter(page: Any, text: str) -> None:
    form = page.locator("form.owf-attribute-filter")
    if not form.is_visible():
        page.locator("details[data-filter-title='attribute'] summary").click()
    form.locator("input[type=text][name=attribute]").fill(text)
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()


def _visit(page: Any, base: str, by_customer: dict[int, str]) -> None:
    log_in(page, base, "/admin/django_openworkflow/workflowrun/?workflow=send-invoice")
    assert _shown(page) == set(by_customer.values())
    _add_filter(page, "amount__gte=1000")  # 950.00 and 99.90 are out: compared as numbers, not as text
    assert _shown(page) == {by_customer[c] for c in (10, 11, 13, 14)}
    _add_filter(page, "due__lt=2026-12-05T00:00:00+01:00")  # the instant, whatever offset each was given in
    assert _shown(page) == {by_customer[c] for c in (10, 13)}
    _add_filter(page, "region=eu")
    assert _shown(page) == {by_customer[10]}
    active = page.locator(".owf-attribute-filters li")
    assert active.count() == 3
    if _sidebar_open(page):
        page.click("#toggle-nav-sidebar")
    snapshot(page, "docs-run-list-attributes.png", full_page=False)
    # × drops one filter and keeps the others.
    active.filter(has_text="region=eu").locator("a").click()
    page.wait_for_load_state()
    assert _shown(page) == {by_customer[c] for c in (10, 13)}
    # A run's page lists its attributes; each links to the runs with that value.
    page.goto(f"{base}/admin/django_openworkflow/workflowrun/{by_customer[10]}/change/")
    attributes = page.locator(".owf-attributes")
    text = " ".join(attributes.text_content().split())
    assert "amount = 1250" in text and "customer_id = 10" in text and "region = eu" in text, text
    attributes.locator("a", has_text="customer_id").click()
    page.wait_for_url("**/workflowrun/?attribute=customer_id*")
    assert _shown(page) == {by_customer[10]}
