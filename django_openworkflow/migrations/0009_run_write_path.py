"""PostgreSQL: a cheaper write path for the run table; a no-op on other databases.

1. **Wake-ups only for someone waiting.** ``pg_notify()`` makes a commit take one
   server-wide lock, held through the WAL flush, so every notifying transaction
   commits one after another. The trigger of 0002 now notifies only when someone
   registered in the new UNLOGGED table ``openworkflow_wakeup``: a worker with free
   slots that found nothing to claim (channel ``openworkflow_due``), or a
   ``handle.result()`` waiting for that very run (channel ``openworkflow_done``,
   key = the run's id). Busy workers and runs nobody waits for commit without it.
   The trigger becomes a constraint trigger deferred to the commit, so that it
   looks at the table when the run becomes visible, not when it was inserted:
   a worker that asked while a long transaction was starting a run is told.
2. **Narrower indexes.** An UPDATE that is not HOT adds an entry to every index
   of the table. The indexes below are rebuilt, under the same names, as partial
   indexes that leave out the rows they never serve (runs without a concurrency
   key, a rate key, a parent, a predecessor; unfinished runs for the finished-at
   indexes), so the common run has entries in fewer of them. The GIN index on
   ``input`` (0008) is dropped: ``manage.py workflows input-index create``
   builds it again for projects that search runs by input (without it that
   search still works, scanning what the other filters leave).
3. **Room for HOT updates.** ``fillfactor = 80`` on the run table leaves a fifth
   of each new page free, so an update that changes no indexed column (a step's
   commit) stays on its page (HOT) instead of adding index entries.

Safe on a live table: the migration is not atomic; each index is built with
``CREATE INDEX CONCURRENTLY`` (no lock that blocks reads or writes; it waits for
running transactions) and the old one dropped with ``DROP INDEX CONCURRENTLY``;
the rename and ``ALTER TABLE ... SET (fillfactor)`` take a SHARE UPDATE
EXCLUSIVE lock (reads and writes go on; only DDL and VACUUM wait). The table and
the trigger function are created and replaced in one statement each; the trigger
is swapped in one transaction that holds an ACCESS EXCLUSIVE lock on the run
table for as long as the swap takes (milliseconds, once running writes end). Workers
still running the previous version never register, so until they are restarted
they find new runs at their next poll instead of at once.

If a concurrent build fails (say it was interrupted), the leftover invalid
index ``<name>_new`` is dropped when the migration is run again.
"""

from django.db import migrations

WAKEUP_TABLE = """
CREATE UNLOGGED TABLE IF NOT EXISTS openworkflow_wakeup (
    channel varchar(64) NOT NULL,
    key varchar(64) NOT NULL,
    pid integer NOT NULL,
    PRIMARY KEY (channel, key, pid)
)
"""

NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION openworkflow_notify() RETURNS trigger AS $$
BEGIN
    IF NEW.status IN ('completed', 'failed', 'canceled') THEN
        IF TG_OP = 'UPDATE' AND OLD.status IS DISTINCT FROM NEW.status
                AND EXISTS (SELECT 1 FROM openworkflow_wakeup
                            WHERE channel = 'openworkflow_done' AND key = NEW.id::text) THEN
            PERFORM pg_notify('openworkflow_done', NEW.id::text);
        END IF;
    ELSIF NEW.worker_id IS NULL AND NEW.available_at <= clock_timestamp() + interval '1 second'
            AND EXISTS (SELECT 1 FROM openworkflow_wakeup WHERE channel = 'openworkflow_due') THEN
        PERFORM pg_notify('openworkflow_due', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

OLD_NOTIFY_FUNCTION = """
CREATE OR REPLACE FUNCTION openworkflow_notify() RETURNS trigger AS $$
BEGIN
    IF NEW.status IN ('completed', 'failed', 'canceled') THEN
        IF TG_OP = 'UPDATE' AND OLD.status IS DISTINCT FROM NEW.status THEN
            PERFORM pg_notify('openworkflow_done', NEW.id::text);
        END IF;
    ELSIF NEW.worker_id IS NULL AND NEW.available_at <= clock_timestamp() + interval '1 second' THEN
        PERFORM pg_notify('openworkflow_due', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""

DEFERRED_TRIGGER = """
BEGIN;
DROP TRIGGER IF EXISTS openworkflow_run_notify ON openworkflow_run;
CREATE CONSTRAINT TRIGGER openworkflow_run_notify
AFTER INSERT OR UPDATE OF status, available_at, worker_id ON openworkflow_run
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION openworkflow_notify();
COMMIT;
"""

IMMEDIATE_TRIGGER = """
BEGIN;
DROP TRIGGER IF EXISTS openworkflow_run_notify ON openworkflow_run;
CREATE TRIGGER openworkflow_run_notify
AFTER INSERT OR UPDATE OF status, available_at, worker_id ON openworkflow_run
FOR EACH ROW EXECUTE FUNCTION openworkflow_notify();
COMMIT;
"""

# name: (columns, partial condition); the names are the ones Django's model state knows.
PARTIAL = {
    "owf_run_concurrency_idx": ("concurrency_key, status, worker_id", "concurrency_key IS NOT NULL"),
    "owf_run_blocked_idx": ("concurrency_key, blocked_at", "blocked_at IS NOT NULL"),
    "owf_run_rate_idx": ("rate_key, started_at", "rate_key IS NOT NULL"),
    "owf_run_retention_idx": ("retention, finished_at", "finished_at IS NOT NULL"),
    "owf_run_finished_idx": ("finished_at", "finished_at IS NOT NULL"),
}
FOREIGN_KEYS = ("parent_step_attempt_id", "continued_from_id")
INPUT_INDEX = (
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS owf_run_input_gin ON openworkflow_run USING gin (input jsonb_path_ops)"
)


def _foreign_key_index(cursor, column):
    """The name Django gave the index of a foreign key column (a hash suffix)."""
    cursor.execute(
        "SELECT i.relname FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] "
        "WHERE x.indrelid = 'openworkflow_run'::regclass AND x.indnatts = 1 AND a.attname = %s "
        "AND NOT x.indisunique AND right(i.relname, 4) <> '_new' ORDER BY i.relname LIMIT 1",
        [column],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def _rebuild(schema_editor, name, columns, condition):
    """Build ``name`` again as ``CREATE INDEX ... WHERE condition``, without blocking writes."""
    new = f"{name[:59]}_new"
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{new}"')
    where = f" WHERE {condition}" if condition else ""
    schema_editor.execute(f'CREATE INDEX CONCURRENTLY "{new}" ON openworkflow_run ({columns}){where}')
    schema_editor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
    schema_editor.execute(f'ALTER INDEX "{new}" RENAME TO "{name}"')


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(WAKEUP_TABLE)
    schema_editor.execute(NOTIFY_FUNCTION)
    schema_editor.execute(DEFERRED_TRIGGER)
    for name, (columns, condition) in PARTIAL.items():
        _rebuild(schema_editor, name, columns, condition)
    for column in FOREIGN_KEYS:
        with schema_editor.connection.cursor() as cursor:
            name = _foreign_key_index(cursor, column)
        if name is not None:
            _rebuild(schema_editor, name, column, f"{column} IS NOT NULL")
    schema_editor.execute("DROP INDEX CONCURRENTLY IF EXISTS owf_run_input_gin")
    schema_editor.execute("ALTER TABLE openworkflow_run SET (fillfactor = 80)")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("ALTER TABLE openworkflow_run RESET (fillfactor)")
    schema_editor.execute(INPUT_INDEX)
    for column in FOREIGN_KEYS:
        with schema_editor.connection.cursor() as cursor:
            name = _foreign_key_index(cursor, column)
        if name is not None:
            _rebuild(schema_editor, name, column, None)
    for name, (columns, _) in PARTIAL.items():
        _rebuild(schema_editor, name, columns, None)
    schema_editor.execute(IMMEDIATE_TRIGGER)
    schema_editor.execute(OLD_NOTIFY_FUNCTION)
    schema_editor.execute("DROP TABLE IF EXISTS openworkflow_wakeup")


class Migration(migrations.Migration):
    # CREATE/DROP INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [("django_openworkflow", "0008_operations")]
    operations = [migrations.RunPython(forward, backward)]
