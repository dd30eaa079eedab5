"""Re-run from a step on the run page: the journal's "Re-run from here", its confirmation, links and copied rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from django_openworkflow.models import StepAttempt, WorkflowRun
from django_openworkflow.testing import drain
from tests.admin.helpers import messages_of, run_url
from tests.admin.test_i18n import localized  # noqa: F401 (a fixture)
from tests.fixtures.rerun_workflows import C_BROKEN, rerun_abc, rerun_parent
from tests.fixtures.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


def rerun_from_url(run: Any, step: str | None = None) -> str:
    url = reverse("admin:django_openworkflow_workflowrun_rerun_from", args=[getattr(run, "id", run)])
    return url if step is None else f"{url}?step={step}"


@pytest.fixture
def failed_at_c() -> Any:
    """A rerun-abc run that failed at step c (c is fixed afterwards)."""
    SideEffect.objects.create(run_id=C_BROKEN, step="c-broken")
    source = rerun_abc.run()
    drain()
    SideEffect.objects.filter(run_id=C_BROKEN).delete()
    assert source.status() == "failed"
    return source


def test_the_journal_offers_rerun_from_each_step_it_can_start_from(admin_client: Any, failed_at_c: Any) -> None:
    page = admin_client.get(run_url(failed_at_c.id)).content.decode()
    for step in ("a", "b", "c"):
        assert rerun_from_url(failed_at_c.id, step) in page
    parent = rerun_parent.run()
    drain()
    page = admin_client.get(run_url(parent.id)).content.decode()
    # After the child step, a copy would share the child: not offered.
    assert rerun_from_url(parent.id, "rerun-leaf") in page and rerun_from_url(parent.id, "b") not in page


def test_confirm_then_rerun_from_here_links_both_runs_and_marks_copied_rows(
    admin_client: Any, failed_at_c: Any
) -> None:
    confirm = admin_client.get(rerun_from_url(failed_at_c.id, "b"))
    text = confirm.content.decode()
    assert confirm.status_code == 200 and "csrfmiddlewaretoken" in text
    assert "whose steps before &#x27;b&#x27; keep the results recorded in that run" in text
    assert WorkflowRun.objects.count() == 1  # a GET starts nothing
    response = admin_client.post(rerun_from_url(failed_at_c.id), {"step": "b"}, follow=True)
    new = WorkflowRun.objects.get(rerun_of=failed_at_c.id)
    assert response.redirect_chain[-1][0] == run_url(new.id)
    assert any("the steps before it were copied from run" in message for message in messages_of(response))
    drain()
    page = admin_client.get(run_url(new.id)).content.decode()
    source_attempt = StepAttempt.objects.get(workflow_run_id=failed_at_c.id, step_name="a").id
    assert f"{run_url(failed_at_c.id)}#attempt-{source_attempt}" in page  # the copied row links to its source
    assert "from step b: the steps before it were copied" in page
    source_page = admin_client.get(run_url(failed_at_c.id)).content.decode()
    assert run_url(new.id) in source_page and "Re-runs" in source_page


def test_a_refused_step_says_why_and_offers_no_form(admin_client: Any) -> None:
    parent = rerun_parent.run()
    drain()
    page = admin_client.get(rerun_from_url(parent.id, "b")).content.decode()
    assert "A re-run cannot start from step &#x27;b&#x27;: step &#x27;rerun-leaf&#x27; before it started" in page
    assert 'name="step"' not in page
    response = admin_client.post(rerun_from_url(parent.id), {"step": "b"}, follow=True)
    assert response.redirect_chain[-1][0] == run_url(parent.id)
    assert any(m.startswith("Not re-run: step 'rerun-leaf' before it") for m in messages_of(response))
    unknown = admin_client.get(rerun_from_url(parent.id, "%3Cscript%3E")).content.decode()
    assert "it has no step &#x27;&lt;script&gt;&#x27;" in unknown
    assert not WorkflowRun.objects.filter(rerun_of=parent.id).exists()


def test_rerun_from_here_needs_the_add_permission(staff_client: Any, failed_at_c: Any) -> None:
    client = staff_client("view", "change")
    assert rerun_from_url(failed_at_c.id, "b") not in client.get(run_url(failed_at_c.id)).content.decode()
    assert client.get(rerun_from_url(failed_at_c.id, "b")).status_code == 403
    assert client.post(rerun_from_url(failed_at_c.id), {"step": "b"}).status_code == 403
    assert client.get(rerun_from_url("not-a-run", "b")).status_code == 404
    assert not WorkflowRun.objects.filter(rerun_of=failed_at_c.id).exists()


def test_rerun_from_here_in_french(admin_client: Any, failed_at_c: Any, localized: None) -> None:  # noqa: F811
    french = {"HTTP_ACCEPT_LANGUAGE": "fr"}
    page = admin_client.get(run_url(failed_at_c.id), **french).content.decode()
    assert "Relancer d’ici" in page and "Re-run from here" not in page
    confirm = admin_client.get(rerun_from_url(failed_at_c.id, "b"), **french).content.decode()
    assert "Relancer depuis l’étape &#x27;b&#x27; : confirmer ?" in confirm
    assert "1 étape garde son résultat" in confirm and "Oui, relancer d’ici" in confirm
    response = admin_client.post(rerun_from_url(failed_at_c.id), {"step": "b"}, follow=True, **french)
    assert any(m.startswith("Exécution ") and "depuis l’étape" in m for m in messages_of(response))
    new_page = response.content.decode()
    assert "Relance de" in new_page and "copiée de l’exécution" in new_page
    assert "depuis l’étape b : les étapes précédentes ont été copiées" in new_page
