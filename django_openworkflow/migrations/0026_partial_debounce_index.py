"""The unique (workflow, debounce key) index holds only the runs that have a key.

Only a debounced run that no worker has claimed yet has a key; the claim
clears it. The index held an entry for every run all the same, and, on
PostgreSQL, a new one at each claim and each finish, which are not HOT
updates (they change ``status``): the largest index of the run table but
one after a backlog, and one write of eight at each of those updates. It
becomes partial, ``WHERE debounce_key IS NOT NULL``, under the same name;
the debounce's queries compare the key with a value, which implies the
condition.

- PostgreSQL: safe on a live table, as 0019. The partial index is built
  with ``CREATE UNIQUE INDEX CONCURRENTLY`` as ``<name>_new``, so keys stay
  unique throughout; the old constraint is dropped (a moment's ACCESS
  EXCLUSIVE lock) and the new index renamed. A build that was interrupted
  leaves ``<name>_new``, dropped when the migration runs again.
- MySQL and MariaDB have no partial indexes: the plain unique index stays,
  as 0005 does for idempotency keys (NULL keys are distinct in it).
- SQLite and any other database: Django's own DDL. On SQLite that copies
  the run table (a table's own constraint cannot be dropped in place), in
  a transaction of its own, holding the write lock for as long as the copy
  takes.
"""

from typing import Any

from django.db import migrations, models
from django.db.migrations.operations.base import Operation

NAME = "owf_run_debounce_key_uniq"
NEW = f"{NAME}_new"
TABLE = "openworkflow_run"
COLUMNS = "workflow_name, debounce_key"
OWN_DDL = ("postgresql", "mysql")
"""The databases whose DDL this migration writes itself (or leaves out)."""

PARTIAL = models.UniqueConstraint(
    fields=("workflow_name", "debounce_key"), condition=models.Q(debounce_key__isnull=False), name=NAME
)


class DjangoDDLExceptOn(Operation):
    """``operation`` itself, whose DDL runs on every database but ``vendors`` (its state change on all)."""

    reversible = True
    # The migration is not atomic (PostgreSQL's CONCURRENTLY), but this operation is: on SQLite its
    # DDL copies the run table (create, copy, drop, rename), which must not commit a step at a time.
    atomic = True

    def __init__(self, vendors: tuple[str, ...], operation: Operation) -> None:
        self.vendors = vendors
        self.operation = operation

    def state_forwards(self, app_label: str, state: Any) -> None:
        self.operation.state_forwards(app_label, state)

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor not in self.vendors:
            self.operation.database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor not in self.vendors:
            self.operation.database_backwards(app_label, schema_editor, from_state, to_state)

    def describe(self) -> str:
        return f"{self.operation.describe()} (except on {', '.join(self.vendors)})"


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NEW}"')
    schema_editor.execute(
        f'CREATE UNIQUE INDEX CONCURRENTLY "{NEW}" ON {TABLE} ({COLUMNS}) WHERE debounce_key IS NOT NULL'
    )
    schema_editor.execute(f'ALTER TABLE {TABLE} DROP CONSTRAINT IF EXISTS "{NAME}"')
    # A run of this migration that stopped after its rename left the partial index under NAME.
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NAME}"')
    schema_editor.execute(f'ALTER INDEX "{NEW}" RENAME TO "{NAME}"')


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NEW}"')
    schema_editor.execute(f'CREATE UNIQUE INDEX CONCURRENTLY "{NEW}" ON {TABLE} ({COLUMNS})')
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{NAME}"')
    # The constraint Django made (0006), on the index just built, which takes the constraint's name.
    schema_editor.execute(f'ALTER TABLE {TABLE} ADD CONSTRAINT "{NAME}" UNIQUE USING INDEX "{NEW}"')


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_openworkflow", "0025_task_claims")]
    operations = [
        DjangoDDLExceptOn(OWN_DDL, migrations.RemoveConstraint(model_name="workflowrun", name=NAME)),
        DjangoDDLExceptOn(OWN_DDL, migrations.AddConstraint(model_name="workflowrun", constraint=PARTIAL)),
        migrations.RunPython(forward, backward),
    ]
