"""App configs: the default one autodiscovers ``<app>.workflows`` modules."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class SimpleOpenWorkflowConfig(AppConfig):
    """The app without autodiscovery: import your workflow modules yourself."""

    name = "django_openworkflow"
    label = "django_openworkflow"
    verbose_name = "Workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers system checks)
        from .dispatch import checks as dispatch_checks  # registers the dispatch checks

        dispatch_checks.load_dispatcher()  # e.g. the Celery dispatcher registers its tasks


class OpenWorkflowConfig(SimpleOpenWorkflowConfig):
    """Default: import every installed app's ``workflows`` module, like ``admin.py``."""

    default = True

    def ready(self) -> None:
        super().ready()
        from .conf import owf_settings
        from .registry import registry

        # register_to makes a failing module roll back what it registered, so
        # one broken workflows.py gives one clear error.
        autodiscover_modules(owf_settings.autodiscover_module, register_to=registry)
