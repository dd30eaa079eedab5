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
        from . import alerts, checks  # noqa: F401  (checks: registers the system checks)
        from .client.runs import start_run  # noqa: F401  (the client hands itself to the registry: spec.run() needs it)
        from .dispatch import checks as dispatch_checks  # registers the dispatch checks
        from .tables import install_migrate_hint

        install_migrate_hint()  # every process (web, runworkflows, Celery workers): see tables.MigrateHint
        dispatch_checks.load_dispatcher()  # e.g. the Celery dispatcher registers its tasks
        alerts.connect()  # mails the admins about failed runs when OPENWORKFLOW["MAIL_ADMINS_ON_FAILURE"] says
        _enable_telemetry()  # metrics and tracing, when the settings turn them on
        if _tasks_backend_configured():
            # Django Tasks: every process that may execute a task needs the built-in workflow.
            from .tasks import register_task_workflow

            register_task_workflow()


def _enable_telemetry() -> None:
    """Enable metrics and tracing in this process as ``OPENWORKFLOW["METRICS"]`` and ``["TRACING"]`` say.

    An extra that is missing does not stop the process (a web server runs no
    system checks): it is logged here, reported by the checks (E070, E071),
    and ``/metrics`` answers 501 naming the extra.
    """
    import logging

    from . import metrics, tracing
    from .conf import owf_settings

    for wanted, enable in ((owf_settings.metrics, metrics.enable), (owf_settings.tracing, tracing.enable)):
        if wanted:
            try:
                enable()
            except ImportError as exc:
                logging.getLogger("django_openworkflow.telemetry").error("%s", exc)


def _tasks_backend_configured() -> bool:
    """Whether ``settings.TASKS`` names our backend, or a subclass of it defined elsewhere.

    Our own paths are read as text. Another path is imported (Django imports
    it anyway on first use); one that does not import is not ours to report.
    """
    import sys

    from django.conf import settings
    from django.utils.module_loading import import_string

    backends = getattr(settings, "TASKS", None)
    if not isinstance(backends, dict):
        return False
    paths = [str(params.get("BACKEND", "")) for params in backends.values() if isinstance(params, dict)]
    if any(path.startswith("django_openworkflow.tasks.") for path in paths):
        return True
    for path in paths:
        try:
            backend = import_string(path)
        except Exception:  # not importable: the Tasks framework reports it when the backend is used
            continue
        ours = sys.modules.get("django_openworkflow.tasks")  # a subclass of WorkflowBackend imported it
        if ours is not None and isinstance(backend, type) and issubclass(backend, ours.WorkflowBackend):
            return True
    return False


class OpenWorkflowConfig(SimpleOpenWorkflowConfig):
    """Default: import every installed app's ``workflows`` module, like ``admin.py``."""

    default = True

    def ready(self) -> None:
        super().ready()
        from .conf import owf_settings
        from .definitions.registry import registry

        # register_to makes a failing module roll back what it registered, so
        # one broken workflows.py gives one clear error.
        autodiscover_modules(owf_settings.autodiscover_module, register_to=registry)
