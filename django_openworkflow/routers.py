"""A database router for the workflow tables on an alias of their own.

With ``OPENWORKFLOW["DATABASE"]`` naming an alias other than ``"default"``::

    DATABASE_ROUTERS = ["django_openworkflow.routers.WorkflowRouter"]

The models' managers already send every query to that alias; the router
tells the rest of Django: ``migrate`` creates this app's tables on that
alias only, ``Model.save()`` of a new instance and the admin's transactions
go there too. It has no opinion on other apps' models (it returns ``None``),
so your own routers, listed after it or before it, still decide for them.

One table of the app is not a workflow table: the HTTP API's tokens
(``ApiToken``) point to users, so they live where the user table is
written (``router.db_for_write`` of the user model), migrated there only.
"""

from __future__ import annotations

from typing import Any

from .conf import owf_settings

APP_LABEL = "django_openworkflow"
WITH_THE_USERS = {"apitoken"}
"""This app's models that live in the user table's database, not on the workflow alias."""


def _ours(model: Any) -> bool:
    meta = getattr(model, "_meta", None)
    return bool(meta is not None and meta.app_label == APP_LABEL and meta.model_name not in WITH_THE_USERS)


def _with_the_users(model: Any) -> bool:
    meta = getattr(model, "_meta", None)
    return bool(meta is not None and meta.app_label == APP_LABEL and meta.model_name in WITH_THE_USERS)


def _users_database() -> str:
    from django.contrib.auth import get_user_model
    from django.db import router

    return router.db_for_write(get_user_model())


class WorkflowRouter:
    """Routes this app's models to ``OPENWORKFLOW["DATABASE"]``, read at each call."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self.db_for_write(model)

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        if _ours(model):
            return owf_settings.database
        return _users_database() if _with_the_users(model) else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        # Between two of our rows (always on the workflow alias); other pairs: not ours to say.
        return True if _ours(obj1) and _ours(obj2) else None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        # This app's tables exist on the workflow alias and nowhere else (the tokens: with the users); other apps:
        # not ours to say.
        if app_label != APP_LABEL:
            return None
        if model_name in WITH_THE_USERS:
            return db == _users_database()
        return db == owf_settings.database
