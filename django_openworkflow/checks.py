"""System checks: settings that would make workers misbehave are reported at startup.

Also whether the workflow tables are migrated, as the deployment check
``openworkflow.W080`` (tables.py says how, for ``runworkflows`` too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, DatabaseError, router

from . import metrics, tracing
from .alerts import APPROVAL_SETTING, SETTING, approval_notify_problem, mail_period
from .conf import DEFAULTS, owf_settings
from .models import WorkflowRun
from .routers import APP_LABEL
from .store import get_backend
from .tables import workflow_tables_problem

ROUTER_PATH = "django_openworkflow.routers.WorkflowRouter"


def check_retention_settings() -> list[checks.CheckMessage]:
    """RETENTION, MAX_RETENTION, PRUNE_INTERVAL and PRUNE_BATCH_SIZE (retention.py); TASK_TIMERS_INTERVAL."""
    from .definitions.retention import _setting, prune_interval

    messages: list[checks.CheckMessage] = []
    reads = (
        lambda: _setting("RETENTION"),
        lambda: _setting("MAX_RETENTION"),
        lambda: prune_interval(),
        lambda: owf_settings.prune_batch_size,
        lambda: owf_settings.task_timers_interval,
    )
    for read in reads:
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E040"))
    return messages


def check_fairness() -> list[checks.CheckMessage]:
    """FAIR_QUEUES and FAIRNESS_QUANTUM, and fairness keys declared where no queue is fair."""
    from .definitions.registry import registry

    messages: list[checks.CheckMessage] = []
    for read in (lambda: owf_settings.fair_queues, lambda: owf_settings.fairness_quantum):
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E007"))
    if messages:
        return messages
    for spec in registry.all():
        if spec.fairness_key is not None and spec.queue not in owf_settings.fair_queues:
            messages.append(
                checks.Warning(
                    f"workflow {spec.name!r} declares a fairness_key, but its queue {spec.queue!r} "
                    "is not in OPENWORKFLOW['FAIR_QUEUES']: its runs are claimed oldest first",
                    hint=f"Add {spec.queue!r} to OPENWORKFLOW['FAIR_QUEUES'], or remove the fairness_key.",
                    id="openworkflow.W007",
                )
            )
    return messages


def check_attributes() -> list[checks.CheckMessage]:
    """An attribute name two workflows declare with different types: a filter on it needs the workflow."""
    from .definitions.registry import registry

    types: dict[str, dict[str, list[str]]] = {}
    for spec in registry.all():
        for name, kind in spec.attributes.items():
            declared = types.setdefault(name, {}).setdefault(kind.__name__, [])
            if spec.name not in declared:
                declared.append(spec.name)
    messages: list[checks.CheckMessage] = []
    for name, by_type in sorted(types.items()):
        if len(by_type) > 1:
            said = "; ".join(f"{kind} by {', '.join(map(repr, names))}" for kind, names in sorted(by_type.items()))
            messages.append(
                checks.Warning(
                    f"attribute {name!r} is declared with different types: {said}",
                    hint="Give it one type everywhere, or rename it in one workflow: a filter on it "
                    "without a workflow (list_runs(attributes=...), the admin, the API) is refused.",
                    id="openworkflow.W009",
                )
            )
    return messages


def check_priority_aging() -> list[checks.CheckMessage]:
    """PRIORITY_AGING, and workflows declared above its ceiling (aged runs never overtake theirs)."""
    from .definitions.registry import registry

    try:
        aging = owf_settings.priority_aging
    except ValueError as exc:
        return [checks.Error(str(exc), id="openworkflow.E013")]
    if aging is None:
        return []
    return [
        checks.Warning(
            f"workflow {spec.name!r} declares priority {spec.priority}, above OPENWORKFLOW['PRIORITY_AGING'] "
            f"ceiling {aging.ceiling}: aged runs never overtake its runs, so a flood of them can starve "
            "lower ones whatever their wait",
            hint=f"Raise the ceiling to at least {spec.priority}, or lower the workflow's priority.",
            id="openworkflow.W013",
        )
        for spec in registry.all()
        if spec.priority > aging.ceiling
    ]


def check_encryption() -> list[checks.CheckMessage]:
    """PAYLOAD_ENCRYPTION (the keys, and cryptography installed) and ENCRYPT_ERRORS (encryption.py)."""
    from . import encryption

    messages: list[checks.CheckMessage] = []
    keys = owf_settings.raw(encryption.SETTING)
    if keys is not None:
        try:
            encryption.parse_keys(keys)
        except encryption.EncryptionNotAvailable as exc:
            messages.append(
                checks.Error(
                    str(exc),
                    hint="Payloads cannot be encrypted or decrypted until this is fixed; see docs/howto/encryption.md.",
                    id="openworkflow.E050",
                )
            )
    errors = owf_settings.raw(encryption.ERRORS_SETTING)
    if not isinstance(errors, bool):
        messages.append(
            checks.Error(
                f"OPENWORKFLOW[{encryption.ERRORS_SETTING!r}] must be True or False, got {errors!r:.60}",
                id="openworkflow.E051",
            )
        )
    return messages


def check_offload() -> list[checks.CheckMessage]:
    """PAYLOAD_COMPRESSION, PAYLOAD_OFFLOAD (offload.py), TASK_FILES_STORAGE and TASK_FILE_MAX_BYTES (task_files.py):
    sizes, and storages STORAGES defines."""
    from . import offload

    messages: list[checks.CheckMessage] = []
    try:
        offload.parse(getattr(settings, "OPENWORKFLOW", None) or {})
    except offload.OffloadSettingError as exc:
        messages.append(
            checks.Error(
                str(exc),
                hint="Payloads cannot be stored until this is fixed; see docs/howto/large-payloads.md.",
                id="openworkflow.E052",
            )
        )
    for read in (lambda: owf_settings.task_files_storage, lambda: owf_settings.task_file_max_bytes):
        try:
            read()
        except ValueError as exc:
            hint = "Tasks' forms cannot take files until this is fixed; see docs/howto/human-tasks.md."
            messages.append(checks.Error(str(exc), hint=hint, id="openworkflow.E052"))
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
        lambda: owf_settings.prefetch,
        lambda: owf_settings.max_step_attempts,
        lambda: owf_settings.max_payload_bytes,
        lambda: owf_settings.admin_live_seconds,
    ):
        try:
            read_int()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E005"))
    messages.extend(check_retention_settings())
    messages.extend(check_fairness())
    messages.extend(check_attributes())
    messages.extend(check_priority_aging())
    messages.extend(check_encryption())
    messages.extend(check_offload())
    try:
        mail_period()
    except ValueError as exc:
        messages.append(checks.Error(f"OPENWORKFLOW[{SETTING!r}]: {exc}", id="openworkflow.E006"))
    problem = approval_notify_problem()
    if problem is not None:
        messages.append(checks.Error(f"OPENWORKFLOW[{APPROVAL_SETTING!r}]: {problem}, or None", id="openworkflow.E008"))
    try:
        owf_settings.task_reassign_permission  # noqa: B018  (read to validate)
    except ValueError as exc:
        messages.append(checks.Error(str(exc), id="openworkflow.E009"))
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


# -- The workflow tables: migrated or not (tables.py says how) --


@checks.register(checks.Tags.database, deploy=True)
def check_workflow_tables(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``check --deploy --database <alias>``: the workflow tables on ``OPENWORKFLOW["DATABASE"]`` are migrated.

    A deployment check, not a plain database check: ``migrate`` runs the
    database checks of the database it migrates, and would report the very
    migrations it is about to apply.
    """
    alias = owf_settings.database
    if not databases or alias not in databases or alias not in settings.DATABASES:
        return []
    try:
        problem = workflow_tables_problem(alias)
    except DatabaseError as exc:
        return [
            checks.Warning(
                f"Could not read which migrations are applied on database {alias!r}: {exc}",
                hint="Check that the database is up and that its user may read django_migrations.",
                id="openworkflow.W081",
            )
        ]
    if problem is None:
        return []
    return [
        checks.Warning(
            f"The workflow tables are not ready: {problem}",
            hint="Until they are, `runworkflows` refuses to start and Celery workers' tasks fail.",
            id="openworkflow.W080",
        )
    ]


def check_queues_served(worker_id: str, serving: Sequence[str]) -> list[checks.CheckMessage]:
    """At a worker's start-up: queues with due runs that neither this worker (``serving``) nor a live one serves.

    A warning, not an error: another worker may be on its way. Paused
    queues are named apart, since their runs wait on purpose.
    """
    from .definitions.registry import registry
    from .store import workers

    overview = workers.queue_overview([spec.queue for spec in registry.all()], (worker_id, serving))
    unserved = [queue for queue in overview if queue.unserved]
    if not unserved:
        return []
    names = ", ".join(f"{queue.name!r} ({queue.due} due)" for queue in unserved)
    paused = [queue.name for queue in overview if queue.paused and queue.due]
    return [
        checks.Warning(
            f"No live worker serves queue(s) {names}: their runs wait until one does.",
            hint="Start a worker with `runworkflows --queue NAME` for each (repeatable), or `--queue '*'` for every "
            "queue." + (f" Paused on purpose, not counted: {', '.join(paused)}." if paused else ""),
            id="openworkflow.W090",
        )
    ]


# -- metrics and tracing (enabled at startup by apps.py) --


@checks.register(checks.Tags.compatibility)
def check_telemetry(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    if owf_settings.metrics and not metrics.available():
        messages.append(
            checks.Error(
                "OPENWORKFLOW['METRICS'] is on but prometheus-client is not installed",
                hint=metrics.PROMETHEUS_EXTRA,
                id="openworkflow.E070",
            )
        )
    if owf_settings.tracing and not tracing.available():
        messages.append(
            checks.Error(
                "OPENWORKFLOW['TRACING'] is on but opentelemetry-api is not installed",
                hint=tracing.OTEL_EXTRA,
                id="openworkflow.E071",
            )
        )
    try:
        owf_settings.metrics_token  # noqa: B018  (read to validate)
    except ValueError as exc:
        messages.append(checks.Error(str(exc), id="openworkflow.E072"))
    return messages
