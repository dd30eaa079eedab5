"""Dispatchers: how started runs reach whatever executes them. The database stays the source of truth.

``OPENWORKFLOW["DISPATCH"]`` names a :class:`Dispatcher` subclass by dotted
path, as Django's ``TASKS`` names a backend (``"worker"`` and ``"celery"``
are short names for the two built in). The class is imported only when it
is named, so the package works without Celery.
"""

from __future__ import annotations

import functools
from typing import Any

from django.core.checks import CheckMessage
from django.utils.module_loading import import_string

from ..conf import owf_settings
from ..definitions.flow import DEFAULT_QUEUE

SHORT_NAMES = {
    "worker": "django_openworkflow.dispatch.WorkerDispatcher",
    "celery": "django_openworkflow.dispatch.celery.CeleryDispatcher",
}
"""What the short values of ``DISPATCH`` stand for."""


class Dispatcher:
    """Hands runs to an executor. Subclass it and name the subclass in ``OPENWORKFLOW["DISPATCH"]``."""

    def ready(self) -> None:
        """At startup (``AppConfig.ready()``): load what the executor's processes need to know."""

    def run_started(self, run_id: Any, queue: str = DEFAULT_QUEUE) -> None:
        """A run was started in ``queue``, in the starter's transaction: tell the executor (after the commit)."""

    def check(self) -> list[CheckMessage]:
        """System check messages about this dispatcher's set-up."""
        return []


class WorkerDispatcher(Dispatcher):
    """``manage.py runworkflows`` processes find due runs in the database themselves (polling, LISTEN)."""


def dispatcher_path() -> str:
    """The dotted path ``DISPATCH`` names (short names resolved)."""
    name = owf_settings.dispatch
    return SHORT_NAMES.get(name, name)


def get_dispatcher() -> Dispatcher:
    """The configured dispatcher, made once per path; ``ImportError`` if it cannot be imported."""
    return _dispatcher(dispatcher_path())


@functools.cache
def _dispatcher(path: str) -> Dispatcher:
    cls = import_string(path)
    if not (isinstance(cls, type) and issubclass(cls, Dispatcher)):
        raise ImportError(f"{path} is not a django_openworkflow.dispatch.Dispatcher subclass")
    return cls()
