"""The store: every SQL the engine, workers, client, CLI and admin need. Never imports the engine.

:func:`get_backend` returns the :class:`~.backends.base.Backend` of the
workflow database, an instance of the class made for its database.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.module_loading import import_string

from ..conf import owf_settings

if TYPE_CHECKING:
    from .backends.base import Backend

BACKENDS = {
    "sqlite": "django_openworkflow.store.backends.sqlite.SQLiteBackend",
    "postgresql": "django_openworkflow.store.backends.postgresql.PostgreSQLBackend",
    "mysql": "django_openworkflow.store.backends.mysql.MySQLBackend",
}
"""The backend class for each Django database vendor; imported only when an alias uses it."""

_backends: dict[str, Backend] = {}
_lock = threading.Lock()


def get_backend(alias: str | None = None) -> Backend:
    """The backend of ``alias`` (default: ``OPENWORKFLOW["DATABASE"]``), made once per alias."""
    alias = alias or owf_settings.database
    backend = _backends.get(alias)
    if backend is None:
        with _lock:
            backend = _backends.get(alias)
            if backend is None:
                vendor = connections[alias].vendor
                if vendor not in BACKENDS:
                    raise ImproperlyConfigured(
                        f"django-openworkflow does not support the {vendor!r} database of alias {alias!r}; "
                        f"supported: {', '.join(BACKENDS)}"
                    )
                backend = _backends[alias] = import_string(BACKENDS[vendor])(alias)
    return backend
