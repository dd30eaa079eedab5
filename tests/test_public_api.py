"""The public API: every name in ``django_openworkflow.__all__``, and every import the README and docs show, works."""

import importlib
import re
from pathlib import Path

import pytest

import django_openworkflow


@pytest.mark.parametrize("name", django_openworkflow.__all__)
def test_every_public_name_imports_from_the_top_level(name):
    module = importlib.import_module("django_openworkflow")
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from django_openworkflow import {name}", namespace)  # as a user's code spells it
    assert namespace[name] is getattr(module, name)


def test_the_public_names_are_the_documented_ones():
    # A name dropped from __all__ (or added without a thought) shows up here.
    assert sorted(django_openworkflow.__all__) == sorted(
        """ApprovalDecision AsyncWorkflowContext ChildRun Concurrency Debounce DeterminismError EventNotPublished
        ForgetRefused Forgotten NonRetryableError OnEvent OpenWorkflowError PayloadError ProgressTimeout PublishedEvent
        RateLimit ResultTimeout RetryAfter RetryPolicy RunFailure RunHandle RunNotFound RunPage Schedule SignalError
        StepAttemptInfo StepFailed StepRecord StepTimeout StepUsageError TaskSubmission UnknownWorkflowError
        WorkflowCanceled WorkflowContext WorkflowFailed WorkflowRegistrationError WorkflowSpec backfill_schedule
        claim_task decide_approval forget get_run list_runs publish_event reassign_task release_task runs_for
        send_event send_signal start_run start_runs submit_task trigger_schedule workflow""".split()
    )


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        django_openworkflow.nope  # noqa: B018


ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def shown_imports(*pages: Path) -> list[str]:
    """Every one-line ``from django_openworkflow... import ...`` in these pages' samples (hidden set-up included)."""
    lines = (line.strip().removeprefix("% ") for page in pages for line in page.read_text().splitlines())
    return sorted({line for line in lines if re.fullmatch(r"from django_openworkflow[\w.]* import [\w, ]+", line)})


def test_the_readme_and_the_docs_have_imports_to_check():
    assert shown_imports(ROOT / "README.md")
    assert len(shown_imports(*PAGES)) >= 20


@pytest.mark.parametrize("line", shown_imports(*PAGES))
def test_every_import_the_readme_and_the_docs_show_works(line):
    exec(line, {})


def test_the_operations_module_still_imports_from_the_top_level():
    # The README showed ``from django_openworkflow import operations`` before the module moved into client/.
    from django_openworkflow import operations
    from django_openworkflow.client import operations as moved

    assert operations is moved
    assert callable(operations.cancel)
