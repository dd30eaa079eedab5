"""Runs link to a subject: any model instance, by its model's label and primary key.

Two nullable text columns and their index, no data to move. Not a foreign
key: the workflow tables may live on another database than the user's
models, and migrations of those models must never touch these tables.
On MySQL and MariaDB both columns compare byte for byte, as the other
keys do (see 0005): the primary keys "AB-1" and "ab-1" are two subjects.
"""

from django.db import migrations, models

TEXT_COLUMNS = [
    ("openworkflow_run", "subject_type", "varchar(200)", "NULL"),
    ("openworkflow_run", "subject_id", "varchar(255)", "NULL"),
]


def mysql_forward(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "mysql":
        return
    collation = "utf8mb4_nopad_bin" if connection.mysql_is_mariadb else "utf8mb4_0900_bin"
    for table, column, kind, null in TEXT_COLUMNS:
        schema_editor.execute(
            f"ALTER TABLE `{table}` MODIFY `{column}` {kind} CHARACTER SET utf8mb4 COLLATE {collation} {null}"
        )


class Migration(migrations.Migration):
    # MySQL cannot roll DDL back: no transaction around it (see 0005).
    atomic = False

    dependencies = [
        ("django_openworkflow", "0015_fair_claim"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="subject_type",
            field=models.CharField(
                blank=True, help_text='The subject\'s model, as "app_label.model".', max_length=200, null=True
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="subject_id",
            field=models.CharField(
                blank=True, help_text="The subject's primary key, as text.", max_length=255, null=True
            ),
        ),
        migrations.RunPython(mysql_forward, migrations.RunPython.noop, elidable=False),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(fields=["subject_type", "subject_id", "created_at"], name="owf_run_subject_idx"),
        ),
    ]
