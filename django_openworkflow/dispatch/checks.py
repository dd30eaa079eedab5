"""Startup of the configured dispatcher: loading it, and its system checks.

Importing this module registers the checks; it imports the dispatcher only
through its dotted path, so the package works without Celery.
"""

from __future__ import annotations

from typing import Any

from django.core import checks

from ..client.dispatcher import SHORT_NAMES, dispatcher_path, get_dispatcher
from ..conf import owf_settings


def load_dispatcher() -> None:
    """Called from ``AppConfig.ready()``: the dispatcher loads what its processes need (Celery: the tasks).

    Celery workers (and beat, which routes by the registered task) then know
    the tasks without listing the module anywhere. A dispatcher that cannot
    be imported is left to :func:`check_dispatch` to report.
    """
    try:
        dispatcher = get_dispatcher()
    except ImportError:
        return
    dispatcher.ready()


@checks.register(checks.Tags.compatibility)
def check_dispatch(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``DISPATCH`` names a dispatcher that imports; then the dispatcher checks its own set-up."""
    name, path = owf_settings.dispatch, dispatcher_path()
    try:
        dispatcher = get_dispatcher()
    except ImportError as exc:
        if path == SHORT_NAMES["celery"] and "celery" in str(exc).lower():
            return [
                checks.Error(
                    "OPENWORKFLOW['DISPATCH'] is 'celery' but Celery is not installed",
                    hint="pip install 'django-openworkflow[celery]', or set DISPATCH to 'worker' and run "
                    "`manage.py runworkflows`.",
                    id="openworkflow.E011",
                )
            ]
        return [
            checks.Error(
                f"OPENWORKFLOW['DISPATCH'] is {name!r}, which cannot be imported as a dispatcher: {exc}",
                hint=f"Use {' or '.join(repr(short) for short in SHORT_NAMES)}, or the dotted path of a "
                "django_openworkflow.dispatch.Dispatcher subclass.",
                id="openworkflow.E010",
            )
        ]
    return dispatcher.check()
