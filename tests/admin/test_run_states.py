"""Retrying and waiting runs, errors in sight: the list's status and error columns, search, run page, dashboard.

The runs are made by the engine itself (``drain``), so what the pages show
is what a worker leaves: a step in its retry backoff, a signal wait, a
parent failed by its child.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from django_openworkflow.admin.tracebacks import fold
from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.testing import drain
from tests.admin.helpers import LIST_URL, run_url
from tests.fixtures.testapp.workflows import always_fails, approval, fails_in_child, keeps_failing, three_steps

pytestmark = pytest.mark.django_db(transaction=True)

DASHBOARD_URL = reverse("admin:django_openworkflow_workflowrun_dashboard")


def _row(html: str, run: Any) -> str:
    """The list's row of ``run``."""
    match = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*?{str(run.id)[:8]}(?:(?!</tr>).)*</tr>", html, re.S)
    assert match, f"no row for {run.id}"
    return match.group()


def _shown(client: Any, query: str) -> set[Any]:
    response = client.get(LIST_URL + query)
    assert response.status_code == 200
    return {run.id for run in response.context["cl"].result_list}


def test_the_list_tells_a_retrying_run_and_a_waiting_run_from_a_parked_one(admin_client: Any) -> None:
    retrying = keeps_failing.run()
    waiting = approval.run({"timeout": "2h"})
    sleeping = keeps_failing.run({"until_attempt": 1})  # the step succeeds, the run sleeps
    drain(skip_sleeps=False)
    response = admin_client.get(LIST_URL)
    html = response.content.decode()
    row = _row(html, retrying)
    assert 'owf-status-retrying">retrying<' in row
    assert "step &#x27;charge&#x27; · attempt 1 of 10 failed · next in 59 m" in row
    assert "last error ValueError: card declined" in row
    assert '<span class="owf-error-cell">ValueError: card declined</span>' in row  # the error column
    row = _row(html, waiting)
    assert 'owf-status-waiting">waiting<' in row
    assert "waiting for signal &#x27;approval&#x27; · times out in 1 h 59 m" in row
    assert 'owf-status-parked">parked<' in _row(html, sleeping)
    counts = {item["status"]: item["count"] for item in response.context["status_counts"]}
    assert (counts["retrying"], counts["waiting"], counts["parked"]) == (1, 1, 1)
    assert _shown(admin_client, "?status=retrying") == {retrying.id}
    assert _shown(admin_client, "?status=waiting") == {waiting.id}
    assert _shown(admin_client, "?status=parked") == {sleeping.id}


def test_the_error_column_shows_the_innermost_error_and_its_step(admin_client: Any) -> None:
    failed = always_fails.run()
    parent = fails_in_child.run()
    fine = three_steps.run()
    drain()
    html = admin_client.get(LIST_URL).content.decode()
    assert '<span class="owf-error-cell">ValueError: kaboom</span>' in _row(html, failed)
    assert "step <code>boom</code>" in _row(html, failed)
    row = _row(html, parent)
    assert '<span class="owf-error-cell">ValueError: kaboom</span>' in row  # the child's, not "child run … failed"
    assert "in a child of step <code>always-fails</code>" in row
    assert "owf-error-cell" not in _row(html, fine)


def test_search_finds_runs_by_error_text_and_step_name(admin_client: Any) -> None:
    retrying = keeps_failing.run()
    failed = always_fails.run()
    parent = fails_in_child.run()
    fine = three_steps.run()
    drain(skip_sleeps=False)
    child = WorkflowRun.objects.get(parent_step_attempt__workflow_run_id=parent.id)
    assert _shown(admin_client, "?q=card+declined") == {retrying.id}
    assert _shown(admin_client, "?q=KABOOM") == {failed.id, parent.id, child.id}  # any case; a child's error too
    assert _shown(admin_client, "?q=ValueError") == {retrying.id, failed.id, parent.id, child.id}
    assert _shown(admin_client, "?q=charge") == {retrying.id}  # a step name
    assert _shown(admin_client, "?q=two") == {fine.id}  # a step that did not fail
    assert _shown(admin_client, "?q=boom") == {failed.id, child.id, parent.id}  # "step 'boom' failed", below
    assert _shown(admin_client, "?q=no+such+error") == set()


def test_the_run_page_of_a_retrying_run_says_so(admin_client: Any) -> None:
    retrying = keeps_failing.run()
    drain(skip_sleeps=False)
    html = admin_client.get(run_url(retrying)).content.decode()
    title = html[html.index('<h1 class="owf-title">') : html.index("</h1>")]
    assert 'owf-status-retrying">retrying<' in title and "attempt 1 of 10 failed · next in 59 m" in title
    assert "Last error" in html and "parked" not in title


def test_the_run_page_of_a_signal_wait_has_the_form_on_top_with_the_name_filled_in(admin_client: Any) -> None:
    waiting = approval.run()
    drain(skip_sleeps=False)
    html = admin_client.get(run_url(waiting)).content.decode()
    title = html[html.index('<h1 class="owf-title">') : html.index("</h1>")]
    assert "waiting for signal &#x27;approval&#x27; · times out in 59 m" in title
    top = html.index("owf-send-signal-top")
    assert top < html.index('class="owf-summary"')  # above the summary
    assert 'name="name" value="approval"' in html[top:]
    assert "<summary>Send a signal</summary>" not in html  # not folded at the bottom as well
    response = admin_client.post(
        reverse("admin:django_openworkflow_workflowrun_signal", args=[waiting.id]),
        {"name": "approval", "json_data": "true", "idempotency_key": ""},
    )
    assert response.status_code == 302
    drain()
    assert waiting.result() == [True]


def test_workflow_attempts_add_up_on_the_run_page(admin_client: Any) -> None:
    done = three_steps.run()
    failed = always_fails.run()
    drain()
    get_backend().retry_failed_run(failed.id)
    drain()

    def attempts(run: Any) -> str:
        html = admin_client.get(run_url(run)).content.decode()
        match = re.search(r"Workflow attempts</dt><dd>(.*?)</dd>", html, re.S)
        assert match
        return re.sub(r"<[^>]+>|\s+", " ", match.group(1)).split(maxsplit=0)[0].strip()

    assert attempts(done) == "1"
    assert re.sub(r"\s+", " ", attempts(failed)) == "2 (2 failed)"  # two real failures, two attempts


def test_the_traceback_starts_with_the_users_frame_and_folds_the_packages(admin_client: Any) -> None:
    failed = always_fails.run()
    drain()
    html = admin_client.get(run_url(failed)).content.decode()
    raised = re.search(r'<pre class="owf-pre owf-raised-in">(.*?)</pre>', html, re.S)
    assert raised and "tests/fixtures/testapp/workflows.py" in raised.group(1) and "in boom" in raised.group(1)
    assert "Raised in your code (step &#x27;boom&#x27;)" in html
    assert html.index("owf-raised-in") < html.index('class="owf-traceback"')
    assert re.search(r'<details class="owf-package-frames"><summary>\d+ frames? of django-openworkflow', html)


def test_a_parent_failed_by_its_child_shows_where_the_childs_step_raised(admin_client: Any) -> None:
    parent = fails_in_child.run()
    drain()
    child = WorkflowRun.objects.get(parent_step_attempt__workflow_run_id=parent.id)
    html = admin_client.get(run_url(parent)).content.decode()
    raised = re.search(r'<pre class="owf-pre owf-raised-in">(.*?)</pre>', html, re.S)
    assert raised and "in boom" in raised.group(1)  # in the child's step, not in the parent's workflow function
    assert f"Raised in your code (child run {str(child.id)[:8]}, step &#x27;boom&#x27;)" in html
    assert "The child run's error:" in html and "ValueError: kaboom" in html


def test_fold_keeps_every_line_and_picks_the_last_frame_outside_the_package() -> None:
    import django_openworkflow.admin.tracebacks as tb

    package = f"{tb.PACKAGE_DIR}/engine/run_steps.py"
    text = (
        "Traceback (most recent call last):\n"
        f'  File "/app/shop/workflows.py", line 3, in order\n    ctx.step.run("charge", charge)\n'
        f'  File "{package}", line 10, in run\n    out = fn()\n          ^^^^\n'
        f'  File "/usr/lib/python3/site-packages/django_openworkflow/engine/execute.py", line 5, in x\n    y()\n'
        f'  File "/app/shop/payments.py", line 7, in charge\n    raise ValueError("no")\n'
        "ValueError: no\n"
    )
    folded = fold(text)
    assert folded.raised_in == '  File "/app/shop/payments.py", line 7, in charge\n    raise ValueError("no")'
    assert [(part.folded, part.frames) for part in folded.parts] == [(False, 0), (True, 2), (False, 0)]
    assert "\n".join(part.text for part in folded.parts) == text.rstrip("\n")


def test_the_dashboard_counts_retrying_and_waiting_runs_and_links_to_them(admin_client: Any) -> None:
    keeps_failing.run()
    keeps_failing.run()
    approval.run()
    drain(skip_sleeps=False)
    response = admin_client.get(DASHBOARD_URL)
    assert (response.context["retrying_now"], response.context["waiting_now"]) == (2, 1)
    html = response.content.decode()
    assert f'href="{LIST_URL}?status=retrying"' in html and f'href="{LIST_URL}?status=waiting"' in html
    assert timezone.now()  # the page is read at the database's clock, whatever the zone
