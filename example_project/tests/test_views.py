"""Testing the example project's view and workflows with django_openworkflow.testing.

A plain Django ``TestCase``: each test runs in a transaction that is rolled
back, and the workflow runs are executed on the test's own thread and
connection, so no worker process is needed. Sleeps are skipped, and
``advance()`` moves the runs through time. Run with
``python manage.py test example_project`` or with pytest.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import TestCase, override_settings

from django_openworkflow import get_run
from django_openworkflow.testing import advance, drain, run_workflows
from example_project.demo.workflows import expense_approval


@override_settings(ROOT_URLCONF="example_project.urls")  # already the project's; pytest runs with tests.settings
class StartViewTests(TestCase):
    def setUp(self) -> None:
        self.client.force_login(get_user_model().objects.create(username="ada"))

    def test_the_view_starts_onboarding_and_the_run_completes(self) -> None:
        with run_workflows():  # executes every run started in the block when it ends
            response = self.client.post("/start/", {"email": "ada@example.com", "delay": "3d"})
        self.assertEqual(response.status_code, 302)
        run_id = response["Location"].rstrip("/").split("/")[-2]  # /admin/.../<run id>/change/
        result = get_run(run_id).result(timeout=0)  # finished already: the 3-day sleep was skipped
        self.assertEqual(result["user_id"], 42)
        self.assertEqual(len(result["emails_sent"]), 2)
        # The child run, whose flaky API call was retried after its backoff (skipped too).
        self.assertEqual(result["review"], {"score": 94, "verdict": "manual review"})

    def test_a_bad_delay_starts_nothing(self) -> None:
        with run_workflows() as runner:
            response = self.client.post("/start/", {"email": "ada@example.com", "delay": "soon"})
        self.assertEqual(response.status_code, 400)
        self.assertEqual(runner.slices, [])


class ExpenseApprovalTests(TestCase):
    def test_an_approved_claim_is_paid(self) -> None:
        handle = expense_approval.run({"employee": "ada", "amount": 120})
        drain()
        self.assertEqual(handle.status(), "running")  # parked, waiting for the manager
        handle.signal("manager-decision", {"approved": True, "by": "grace"})
        drain()
        self.assertEqual(handle.result(timeout=0)["approved_by"], "grace")

    def test_a_claim_nobody_decides_is_escalated_after_seven_days(self) -> None:
        handle = expense_approval.run({"employee": "ada", "amount": 120})
        drain()
        advance("7d")  # past the wait's timeout, in no time
        drain()
        self.assertEqual(handle.result(timeout=0)["escalated_to"], "finance")
