"""System checks: settings that would make workers misbehave are reported at startup."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, router

from .conf import DEFAULTS, owf_settings
from .models import WorkflowRun
from .routers import APP_LABEL
from .store import get_backend

ROUTER_PATH = "django_openworkflow.routers.WorkflowRouter"


def check_retention_settings() -> list[checks.CheckMessage]:
    """RETENTION, MAX_RETENTION, PRUNE_INTERVAL and PRUNE_BATCH_SIZE (retention.py)."""
    from .retention import _setting, prune_interval

    messages: list[checks.CheckMessage] = []
    reads = (
        lambda: _setting("RETENTION"),
        lambda: _setting("MAX_RETENTION"),
        lambda: prune_interval(),
        lambda: owf_settings.prune_batch_size,
    )
    for read in reads:
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E040"))
    return messages


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    unknown = owf_settings.unknown_keys()
    if unknown:
        messages.append(
            checks.Error(
                f"OPENWORKFLOW has unknown keys: {', '.join(unknown)}",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="openworkflow.E001",
            )
        )
    durations = (
        ("LEASE", lambda: owf_settings.lease),
        ("POLL_INTERVAL", lambda: owf_settings.poll_interval),
        ("DRAIN_TIMEOUT", lambda: owf_settings.drain_timeout),
    )
    for key, read in durations:
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(f"OPENWORKFLOW[{key!r}]: {exc}", id="openworkflow.E002"))
    for read_int in (
        lambda: owf_settings.concurrency,
        lambda: owf_settings.max_step_attempts,
        lambda: owf_settings.max_payload_bytes,
    ):
        try:
            read_int()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E005"))
    messages.extend(check_retention_settings())
    if owf_settings.database not in settings.DATABASES:
        messages.append(
            checks.Error(
                f"OPENWORKFLOW['DATABASE'] is {owf_settings.database!r}, which is not in DATABASES",
                id="openworkflow.E003",
            )
        )
        return messages
    messages.extend(check_workflow_database(owf_settings.database))
    try:
        backend = get_backend()
    except ImproperlyConfigured as exc:
        messages.append(checks.Error(str(exc), id="openworkflow.E004"))
        return messages
    messages.extend(backend.check())
    return messages


def check_workflow_database(alias: str) -> list[checks.CheckMessage]:
    """The workflow tables on an alias of their own: what that changes, and whether the routers agree."""
    if alias == DEFAULT_DB_ALIAS:
        return []
    messages: list[checks.CheckMessage] = [
        checks.Warning(
            f"OPENWORKFLOW['DATABASE'] is {alias!r}: a run started inside transaction.atomic() on "
            f"{DEFAULT_DB_ALIAS!r} is not atomic with your writes there. It is committed on {alias!r} "
            "when run() returns: it stays if your transaction rolls back, and a worker may execute it "
            "before your writes are committed (and visible).",
            hint=(
                f"Start runs inside transaction.atomic(using={alias!r}) to make them atomic with writes to "
                f"{alias!r}, or from transaction.on_commit() to start them only once your writes are "
                "committed; then silence this warning with SILENCED_SYSTEM_CHECKS = ['openworkflow.W030']."
            ),
            id="openworkflow.W030",
        )
    ]
    if not router.allow_migrate_model(alias, WorkflowRun):
        messages.append(
            checks.Error(
                f"DATABASE_ROUTERS do not allow {APP_LABEL}'s migrations on {alias!r}, "
                f"OPENWORKFLOW['DATABASE']: `migrate --database={alias}` will not create the workflow tables",
                hint=f"Add {ROUTER_PATH!r} to DATABASE_ROUTERS, before routers that refuse it.",
                id="openworkflow.E030",
            )
        )
        return messages
    problems = [
        f"{what} go to {routed!r}"
        for what, routed in (
            ("reads", router.db_for_read(WorkflowRun)),
            ("writes (Model.save(), the admin's transactions)", router.db_for_write(WorkflowRun)),
        )
        if routed != alias
    ]
    elsewhere = [db for db in settings.DATABASES if db != alias and router.allow_migrate_model(db, WorkflowRun)]
    if elsewhere:
        problems.append(f"`migrate` also creates the workflow tables on {', '.join(map(repr, elsewhere))}")
    if problems:
        messages.append(
            checks.Warning(
                f"OPENWORKFLOW['DATABASE'] is {alias!r} but DATABASE_ROUTERS do not route {APP_LABEL} there: "
                f"{'; '.join(problems)}",
                hint=f"Add {ROUTER_PATH!r} to DATABASE_ROUTERS.",
                id="openworkflow.W031",
            )
        )
    return messages
