"""pytest plugin of django-openworkflow: the ``workflow_runner`` fixture.

Registered through the ``pytest11`` entry point, so installing the package
is enough. It imports nothing of Django's at load time (pytest loads it
before pytest-django configures the settings), and works without
pytest-django too: then the test itself must have set Django up and given
database access.

::

    def test_signup(client, workflow_runner):
        client.post("/signup/", {"email": "ada@example.com"})
        workflow_runner.drain()              # sleeps skipped
        ...
        workflow_runner.advance("7d")        # past a wait's timeout
        workflow_runner.drain()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from . import WorkflowRunner

_DB_FIXTURES = ("db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback")


@pytest.fixture
def workflow_runner(request: pytest.FixtureRequest) -> WorkflowRunner:
    """A :class:`~django_openworkflow.testing.WorkflowRunner`: ``.drain()`` executes due runs here, ``.advance()``.

    With pytest-django, a test that asked for no database gets the ``db``
    fixture (the test's transaction, rolled back afterwards); mark it
    ``@pytest.mark.django_db(transaction=True)`` for committed writes. Both work.
    """
    if request.config.pluginmanager.hasplugin("django"):
        marked = request.node.get_closest_marker("django_db") is not None
        if not marked and not any(name in request.fixturenames for name in _DB_FIXTURES):
            request.getfixturevalue("db")
    from . import WorkflowRunner

    return WorkflowRunner()
