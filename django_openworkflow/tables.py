"""The workflow tables on the workflow alias: which they are, whether they are migrated, and what to run.

``manage.py check --deploy`` (checks.py) and ``runworkflows`` ask
:func:`workflow_tables_problem` before they use them; a worker that meets a
missing table anyway (dropped while it ran) logs the database error with
the ``migrate`` command to run beside it (:class:`MigrateHint`, installed by
the app's ``ready()``).
"""

from __future__ import annotations

import logging
import re

from django.apps import apps
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections

from .conf import owf_settings
from .routers import APP_LABEL, WITH_THE_USERS


def migrate_command(alias: str) -> str:
    """The command that creates the workflow tables on ``alias``."""
    return "manage.py migrate" if alias == DEFAULT_DB_ALIAS else f"manage.py migrate --database={alias}"


def unapplied_migrations(alias: str) -> list[str]:
    """This app's migrations, and those they depend on, not applied on ``alias`` (``app.name``, in order).

    Reads the ``django_migrations`` table: raises ``DatabaseError`` when the database does not answer.
    """
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[alias])
    targets = [node for node in executor.loader.graph.leaf_nodes() if node[0] == APP_LABEL]
    return [f"{migration.app_label}.{migration.name}" for migration, _ in executor.migration_plan(targets)]


def missing_tables(alias: str) -> list[str]:
    """The tables of this app's models that do not exist on ``alias``."""
    return sorted(workflow_tables() - set(connections[alias].introspection.table_names()))


def workflow_tables_problem(alias: str) -> str | None:
    """Why the workflow tables on ``alias`` cannot be used yet, and what to run; None when they can.

    Raises ``DatabaseError`` when the database does not answer.
    """
    pending = unapplied_migrations(alias)
    if pending:
        shown = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
        return (
            f"{len(pending)} migration(s) that {APP_LABEL} needs are not applied on database {alias!r} "
            f"(OPENWORKFLOW['DATABASE']): {shown}. Run `{migrate_command(alias)}` first."
        )
    missing = missing_tables(alias)
    if missing:
        database = "" if alias == DEFAULT_DB_ALIAS else f" --database={alias}"
        return (
            f"the table(s) {', '.join(missing)} do not exist on database {alias!r} (OPENWORKFLOW['DATABASE']) "
            f"although the migrations of {APP_LABEL} are recorded as applied there: they were dropped, or "
            f"DATABASE_ROUTERS kept `migrate` from creating them (openworkflow.E030). Drop what is left of "
            f"them, then run `manage.py migrate {APP_LABEL} zero --fake{database}` and `{migrate_command(alias)}`."
        )
    return None


# What SQLite, PostgreSQL and MySQL/MariaDB say of a table or a column that does not exist.
# PostgreSQL's words may be translated (lc_messages), its SQLSTATE is not; MySQL has error numbers.
_MISSING = re.compile(
    r"no such (?:table|column)|^(?:relation|column) .* does not exist|table '[^']*' doesn't exist|unknown column",
    re.IGNORECASE | re.MULTILINE,
)
_PG_UNDEFINED = {"42P01", "42703"}  # undefined_table, undefined_column
_MYSQL_UNDEFINED = {1146, 1054}  # ER_NO_SUCH_TABLE, ER_BAD_FIELD_ERROR


def is_missing_table(exc: BaseException) -> bool:
    """Whether a database error says that a table (or a column of one) does not exist: a schema not migrated."""
    for error in (exc, exc.__cause__):
        if error is None:
            continue
        if {getattr(error, "sqlstate", None), getattr(error, "pgcode", None)} & _PG_UNDEFINED:
            return True
        if error.args and isinstance(error.args[0], int) and error.args[0] in _MYSQL_UNDEFINED:
            return True
    return bool(_MISSING.search(str(exc)))


def workflow_tables() -> set[str]:
    """The tables of this app's models on the workflow alias (the API tokens' is where the users are)."""
    models = apps.get_app_config(APP_LABEL).get_models()
    return {
        m._meta.db_table
        for m in models
        if m._meta.managed and not m._meta.proxy and m._meta.model_name not in WITH_THE_USERS
    }


class MigrateHint(logging.Filter):
    """Adds what to run to a log record whose database error says a workflow table (or column) is missing.

    The worker's "claim failed (no such table: ...); retrying" alone does not
    say that ``migrate`` is the fix. The loggers of the loops that retry
    database errors get this filter (:data:`HINTED_LOGGERS`); it looks at
    the exception given as an argument or as ``exc_info``, not at the words
    of the message. An error that names no workflow table (a step's query of
    your own tables) is left alone.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        given = list(record.args) if isinstance(record.args, tuple) else []
        if record.exc_info and record.exc_info[1] is not None:
            given.append(record.exc_info[1])
        missing = [arg for arg in given if isinstance(arg, DatabaseError) and is_missing_table(arg)]
        if not missing:  # the common case, decided without the app registry
            return True
        ours = workflow_tables()
        if not any(table in str(error) for error in missing for table in ours):
            return True
        alias = owf_settings.database
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted: logging reports it, the caller must not see it
            return True
        record.msg = (
            f"{message} -- the workflow tables are missing or not migrated on database {alias!r}: "
            f"run `{migrate_command(alias)}`"
        )
        record.args = None
        return True


HINTED_LOGGERS = (
    "django_openworkflow.worker",  # runworkflows: claims, heartbeats, slices
    "django_openworkflow.dispatch",  # Celery tasks' claims, the sweep
    "django_openworkflow.schedules",
    "django_openworkflow.retention",
)


def install_migrate_hint() -> None:
    """Give :data:`HINTED_LOGGERS` the :class:`MigrateHint` filter (once)."""
    for name in HINTED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(existing, MigrateHint) for existing in logger.filters):
            logger.addFilter(MigrateHint())
