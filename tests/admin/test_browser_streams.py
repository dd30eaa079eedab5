"""The run page's Progress box in a real browser: shown, readable in light and dark, no console error.

On test_browser_live.py's example project (on the suite's kind of database), with a run
that a process on the example project's settings starts and executes to its end. With
OPENWORKFLOW_SCREENSHOTS=docs the docs' picture is refreshed (``docs/run-page-progress.png``,
from the light pass).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest

from tests.admin.test_browser import ARTIFACTS, DOCS, NEEDS_CHROMIUM, WIDE, Watched, chromium, log_in, snapshot
from tests.admin.test_browser_live import example_admin, in_example_project, live_admin  # noqa: F401 (fixtures)

pytestmark = [NEEDS_CHROMIUM, pytest.mark.database]  # the suite's database, from a subprocess

REPORT = """
from django_openworkflow import workflow
from django_openworkflow.testing import drain


@workflow(name="build-report")
def build_report(ctx):
    ctx.publish("phase", "collecting")
    for n in range(12):
        ctx.stream("log").write(f"read page {n + 1} of 12")
        if n % 4 == 3:
            ctx.publish("pages", {"done": n + 1, "of": 12})
            ctx.step.run("summarise", lambda: n)
    ctx.publish("phase", "done")
    return "ok"


run = build_report.run()
drain(run_ids=[run.id])  # the seeded runs wait as they are
print(run.id)
"""


def test_the_progress_box_in_a_real_browser(live_admin: dict[str, Any]) -> None:  # noqa: F811
    base = live_admin["base"]
    run_id = in_example_project(live_admin["database"], REPORT).splitlines()[-1]
    with chromium() as browser:
        for scheme in ("light", "dark"):
            context = browser.new_context(viewport=WIDE, color_scheme=scheme)
            watched = Watched(context.new_page())
            page = watched.page
            log_in(page, base, f"/admin/django_openworkflow/workflowrun/{run_id}/change/")
            box = page.locator(".owf-progress")
            assert box.is_visible()
            text = box.inner_text()
            assert "pages" in text and "stream, 12 chunks" in text and '11: "read page 12 of 12"' in text
            snapshot(box, f"run-page-progress-{scheme}.png")
            context.close()
            assert watched.errors == [], f"{scheme}: errors in the browser:\n" + "\n".join(watched.errors)
    if os.environ.get("OPENWORKFLOW_SCREENSHOTS") == "docs":
        shutil.copyfile(ARTIFACTS / "run-page-progress-light.png", DOCS / "run-page-progress.png")
