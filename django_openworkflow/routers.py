"""A database router for the workflow tables on an alias of their own.

With ``OPENWORKFLOW["DATABASE"]`` naming an alias other than ``"default"``::

    DATABASE_ROUTERS = ["django_openworkflow.routers.WorkflowRouter"]

The models' managers already send every query to that alias; the router
tells the rest of Django: ``migrate`` creates this app's tables on that
alias only, ``Model.save()`` of a new instance and the admin's transactions
go there too. It has no opinion on other apps' models (it returns ``None``),
so your own routers, listed after it or before it, still decide for them.
"""

from __future__ import annotations

from typing import Any

from .conf import owf_settings

APP_LABEL = "django_openworkflow"


def _ours(model: Any) -> bool:
    return bool(getattr(model, "_meta", None) is not None and model._meta.app_label == APP_LABEL)


class WorkflowRouter:
    """Routes this app's models to ``OPENWORKFLOW["DATABASE"]``, read at each call."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return owf_settings.database if _ours(model) else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return owf_settings.database if _ours(model) else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # Between two of our rows (always on the workflow alias); other pairs: not ours to say.
        return True if _ours(obj1) and _ours(obj2) else None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        # This app's tables exist on the workflow alias and nowhere else; other apps: not ours to say.
        return db == owf_settings.database if app_label == APP_LABEL else None
