"""Fair queues: a run's fairness key and its place in line, and the indexes the fair claim reads.

Two nullable columns, no data to move: only runs started into a queue listed
in ``OPENWORKFLOW["FAIR_QUEUES"]`` fill them, so the partial indexes hold
those runs alone and cost the other queues' writes nothing. MySQL and
MariaDB ignore partial indexes: they get a plain one for a key's last place
(their claim reads the due runs of the queue through
``owf_run_queue_claim_status_idx``, as without fairness), and the key is
compared byte for byte, as the other keys are (migration 0005).
"""

from django.db import migrations, models

MYSQL_TAIL_INDEX = "owf_run_fair_tail_mysql_idx"


def mysql_forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    schema_editor.execute(
        "ALTER TABLE `openworkflow_run` MODIFY `fairness_key` varchar(255) "
        f"CHARACTER SET utf8mb4 COLLATE {collation} NULL"
    )
    schema_editor.execute(f"CREATE INDEX `{MYSQL_TAIL_INDEX}` ON `openworkflow_run` (fairness_key, status, fair_at)")


def mysql_backward(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute(f"DROP INDEX `{MYSQL_TAIL_INDEX}` ON `openworkflow_run`")


class Migration(migrations.Migration):
    dependencies = [("django_openworkflow", "0014_schedule_policies")]
    # MySQL cannot roll DDL back: no transaction around its part (a no-op elsewhere).
    atomic = False

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="fair_at",
            field=models.DateTimeField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="fairness_key",
            field=models.CharField(blank=True, editable=False, max_length=255, null=True),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(
                condition=models.Q(("fair_at__isnull", False), ("status__in", ["pending", "running"])),
                fields=["queue", "-priority", "fair_at", "available_at"],
                name="owf_run_fair_claim_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(
                condition=models.Q(("fair_at__isnull", False), ("status", "pending")),
                fields=["fairness_key", "fair_at"],
                name="owf_run_fair_tail_idx",
            ),
        ),
        migrations.RunPython(mysql_forward, mysql_backward),
    ]
