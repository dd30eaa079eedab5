"""PostgreSQL: the indexes added since 0009 leave out the runs they never serve; a no-op elsewhere.

An UPDATE that is not HOT (a claim, a finish) adds an entry to every index of
the table, and the run table's indexes for parent-close policies (0013),
subjects (0016) and re-runs (0012), and the step table's index of child runs,
held an entry for every row, though most runs have no such parent, subject,
source run or child: a one-step run wrote 33 entries into the run table's
indexes, now 24. They are rebuilt, under the same names, as partial indexes
``WHERE <column> IS NOT NULL``; every query that uses them compares the column
with a value, which PostgreSQL knows implies the condition.

Safe on a live table, as 0009: not atomic, each index built with ``CREATE INDEX
CONCURRENTLY`` and the old one dropped with ``DROP INDEX CONCURRENTLY``; a build
that was interrupted leaves ``<name>_new``, dropped when the migration runs again.
"""

from django.db import migrations

# table: {index name: (columns, partial condition)}; the names are the ones Django's model state knows.
PARTIAL = {
    "openworkflow_run": {
        "owf_run_closes_with_idx": ("closes_with, status", "closes_with IS NOT NULL"),
        "owf_run_subject_idx": ("subject_type, subject_id, created_at", "subject_type IS NOT NULL"),
    },
}
# table: foreign key columns whose index Django named with a hash suffix.
FOREIGN_KEYS = {"openworkflow_run": ("rerun_of_id",), "openworkflow_step_attempt": ("child_workflow_run_id",)}


def _foreign_key_index(cursor, table, column):
    """The name Django gave the single-column index of a foreign key column."""
    cursor.execute(
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
        "WHERE x.indrelid = %s::regclass AND x.indnatts = 1 AND a.attname = %s "
        "AND NOT x.indisunique AND right(i.relname, 4) <> '_new' ORDER BY i.relname LIMIT 1",
        [table, column],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def _rebuild(schema_editor, table, name, columns, condition):
    """Build ``name`` again (``WHERE condition``, or whole), without blocking writes."""
    new = f"{name[:59]}_new"
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{new}"')
    where = f" WHERE {condition}" if condition else ""
    schema_editor.execute(f'CREATE INDEX CONCURRENTLY "{new}" ON {table} ({columns}){where}')
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    schema_editor.execute(f'ALTER INDEX "{new}" RENAME TO "{name}"')


def _rebuild_all(schema_editor, partial):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, indexes in PARTIAL.items():
        for name, (columns, condition) in indexes.items():
            _rebuild(schema_editor, table, name, columns, condition if partial else None)
    for table, columns in FOREIGN_KEYS.items():
        for column in columns:
            with schema_editor.connection.cursor() as cursor:
                name = _foreign_key_index(cursor, table, column)
            if name is not None:
                _rebuild(schema_editor, table, name, column, f"{column} IS NOT NULL" if partial else None)


def forward(apps, schema_editor):
    _rebuild_all(schema_editor, partial=True)


def backward(apps, schema_editor):
    _rebuild_all(schema_editor, partial=False)


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_openworkflow", "0018_approvals")]
    operations = [migrations.RunPython(forward, backward)]
