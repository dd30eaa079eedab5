"""MySQL and MariaDB: what the conditional constraints and partial indexes do elsewhere; a no-op on other databases.

MySQL and MariaDB ignore a unique constraint or an index with a condition, so:

- idempotency keys get plain unique indexes, which hold under concurrency
  and let any number of NULL keys coexist (NULLs are distinct in a unique
  index), as the conditional constraints do on SQLite and PostgreSQL;
- the claim gets an index on (status, available_at), and senders of events
  one on the open waits (kind, status);
- names and keys are compared byte for byte with no trailing-space padding,
  as on the other databases: with a server's default collation
  ("utf8mb4_general_ci"), the keys "Order-1" and "order-1 " would be one key.

The DDL lives here, not in the backend class, because a migration must
keep doing what it did when it was written.
"""

from django.db import migrations

# (table, column, type, nullability)
TEXT_COLUMNS = [
    ("openworkflow_run", "workflow_name", "varchar(255)", "NOT NULL"),
    ("openworkflow_run", "version", "varchar(255)", "NULL"),
    ("openworkflow_run", "idempotency_key", "varchar(255)", "NULL"),
    ("openworkflow_run", "worker_id", "varchar(64)", "NULL"),
    ("openworkflow_step_attempt", "step_name", "varchar(255)", "NOT NULL"),
    ("openworkflow_signal", "name", "varchar(255)", "NOT NULL"),
    ("openworkflow_signal", "idempotency_key", "varchar(255)", "NULL"),
    ("openworkflow_event", "event_type", "varchar(255)", "NOT NULL"),
    ("openworkflow_event", "idempotency_key", "varchar(255)", "NULL"),
]

INDEXES = [
    ("owf_run_idempotency_key_uniq", "UNIQUE", "openworkflow_run", "workflow_name, idempotency_key"),
    ("owf_signal_idempotency_key_uniq", "UNIQUE", "openworkflow_signal", "workflow_run_id, name, idempotency_key"),
    ("owf_event_idempotency_key_uniq", "UNIQUE", "openworkflow_event", "event_type, idempotency_key"),
    ("owf_run_claim_status_idx", "", "openworkflow_run", "status, available_at"),
    ("owf_step_open_kind_status_idx", "", "openworkflow_step_attempt", "kind, status"),
]


def forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    for table, column, kind, null in TEXT_COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE `{table}` MODIFY `{column}` {kind} CHARACTER SET utf8mb4 COLLATE {collation} {null}"
        )
    for name, kind, table, columns in INDEXES:
        schema_editor.execute(f"CREATE {kind} INDEX `{name}` ON `{table}` ({columns})")


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for name, _, table, _ in INDEXES:
        schema_editor.execute(f"DROP INDEX `{name}` ON `{table}`")


class Migration(migrations.Migration):
    dependencies = [("django_openworkflow", "0004_run_status_worker_index")]
    # MySQL cannot roll DDL back: no transaction around it (a no-op elsewhere).
    atomic = False
    operations = [migrations.RunPython(forward, backward)]
