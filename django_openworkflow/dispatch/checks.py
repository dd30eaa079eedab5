"""Startup of the configured dispatcher: system checks, and loading the Celery tasks.

Importing this module registers the checks; it never imports Celery itself,
so the package works without it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from django.core import checks

from ..conf import owf_settings

DISPATCHERS = ("worker", "celery")


def load_dispatcher() -> None:
    """With ``DISPATCH = "celery"``, import the Celery task module (called from ``AppConfig.ready()``).

    Celery workers (and beat, which routes by the registered task) then know
    the tasks without listing the module anywhere. Without Celery installed,
    nothing is imported and :func:`check_dispatch` reports the problem.
    """
    if owf_settings.dispatch == "celery" and importlib.util.find_spec("celery") is not None:
        importlib.import_module("django_openworkflow.dispatch.celery")


@checks.register(checks.Tags.compatibility)
def check_dispatch(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``DISPATCH`` names a known dispatcher; for Celery, Celery is installed and an app is configured."""
    dispatch = owf_settings.dispatch
    if dispatch not in DISPATCHERS:
        return [
            checks.Error(
                f"OPENWORKFLOW['DISPATCH'] is {dispatch!r}",
                hint=f"Use one of: {', '.join(repr(name) for name in DISPATCHERS)}.",
                id="openworkflow.E010",
            )
        ]
    if dispatch != "celery":
        return []
    try:
        import celery  # type: ignore[import-untyped]
    except ImportError:
        return [
            checks.Error(
                "OPENWORKFLOW['DISPATCH'] is 'celery' but Celery is not installed",
                hint="pip install 'django-openworkflow[celery]', or set DISPATCH to 'worker' and run "
                "`manage.py runworkflows`.",
                id="openworkflow.E011",
            )
        ]
    app = celery.current_app
    conf = app.conf
    if not (conf.broker_url or conf.broker_write_url):
        return [
            checks.Error(
                f"OPENWORKFLOW['DISPATCH'] is 'celery' but the current Celery app ({app.main!r}) "
                "has no broker configured",
                hint="Create your project's Celery app (proj/celery.py: Celery('proj') with "
                "config_from_object('django.conf:settings', namespace='CELERY')), import it in "
                "proj/__init__.py so every process loads it, and set CELERY_BROKER_URL.",
                id="openworkflow.E012",
            )
        ]
    return []
