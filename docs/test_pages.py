"""The docs' samples run as tests: every ```python block of every page, in order (Sybil parses them).

Each page is one test (``docs/test_pages.py``), so a page's blocks run top to
bottom in one process and share names, like a module, even when pytest-xdist
spreads the suite over several processes. A page runs in the test's database
transaction (rolled back at its end) and with a workflow registry of its
own (emptied before the page, restored after it), so a page sees no other
page's or test's runs and workflows. A block that
cannot run here (a file of a project we do not have) is marked on the page
with ``% skip: next`` and a reason.

Hidden set-up, when a page needs one, goes in a MyST comment block::

    % invisible-code-block: python
    %
    % from django_openworkflow import workflow
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.myst import ClearNamespaceParser, PythonCodeBlockParser, SkipParser

from django_openworkflow.conf import owf_settings
from django_openworkflow.definitions.registry import registry

DOCS = Path(__file__).resolve().parent

SAMPLES = Sybil(parsers=[PythonCodeBlockParser(), SkipParser(), ClearNamespaceParser()])

# Pages whose samples assume the workflow tables on "default", as a project has them unless it sets
# OPENWORKFLOW["DATABASE"]: skipped when the suite runs with them elsewhere (OWF_TEST_WORKFLOW_DATABASE).
ON_THE_DEFAULT_DATABASE = {
    Path("howto/steps.md"): "its atomic=True step writes a User, which commits with the journal only on one database",
}

PAGES = sorted(path.relative_to(DOCS) for path in DOCS.rglob("*.md") if "_build" not in path.parts)


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize("page", PAGES, ids=str)
def test_the_samples_of(page: Path) -> None:
    if page in ON_THE_DEFAULT_DATABASE and owf_settings.database != "default":
        pytest.skip(f"the workflow tables are on {owf_settings.database!r}: {ON_THE_DEFAULT_DATABASE[page]}")
    document = SAMPLES.parse(DOCS / page)
    saved = dict(registry._registry)
    registry._registry.clear()  # the page's own workflows only, whatever the suite registered before
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except Exception as error:
                raise AssertionError(f"docs/{page}, line {example.line}: {error!r}") from error
    finally:
        registry._registry.clear()
        registry._registry.update(saved)
