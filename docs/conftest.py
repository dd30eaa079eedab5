"""The docs' samples run as tests (Sybil): every ```python block of every page, in order.

A page is one namespace, like a module: its blocks run top to bottom and share
names. Each page runs in a transaction that is rolled back after its last block
and with the workflow registry as it was, so pages do not see each other's runs
or workflows. A block that cannot run here (a shell line, a file of a project we
do not have) is marked on the page with ``% skip: next`` and a reason.

Hidden set-up, when a page needs one, goes in a MyST comment block::

    % invisible-code-block: python
    %
    % from django_openworkflow import workflow
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from django.db import connections, transaction
from sybil import Sybil
from sybil.parsers.myst import ClearNamespaceParser, PythonCodeBlockParser, SkipParser

DOCS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The marker makes pytest-django create the test databases for the pages' samples;
    # _django_db_helper below replaces its per-test transaction with the page's.
    for item in items:
        if DOCS in item.path.parents:
            item.add_marker(pytest.mark.django_db(databases="__all__"))


@pytest.fixture
def _django_db_helper(docs_page: None, django_db_blocker: Any) -> Iterator[None]:
    """Overrides pytest-django's per-test transaction, under docs/ only: a page's blocks share one."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture(scope="module")
def docs_page(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    """One page's database transaction (rolled back at its end) and workflow registry (restored)."""
    from django_openworkflow.definitions.registry import registry

    saved = dict(registry._registry)
    with django_db_blocker.unblock(), ExitStack() as stack:
        for alias in connections:
            stack.enter_context(transaction.atomic(using=alias))
        try:
            yield
        finally:
            for alias in connections:
                transaction.set_rollback(True, using=alias)
            registry._registry.clear()
            registry._registry.update(saved)


pytest_collect_file = Sybil(
    parsers=[PythonCodeBlockParser(), SkipParser(), ClearNamespaceParser()],
    patterns=["*.md", "**/*.md"],
    fixtures=["docs_page"],
).pytest()
