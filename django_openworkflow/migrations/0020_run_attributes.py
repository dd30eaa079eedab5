"""Typed run attributes: a table of their own, one row per (run, name), one typed and indexed column per type.

A new table, deleted with its run; no data to move. On MySQL and MariaDB the
name and the text value compare byte for byte, as the other keys do (see
0005 and 0016): "EU" and "eu" are two regions on every database.
"""

import django.db.models.deletion
from django.db import migrations, models

TEXT_COLUMNS = [
    ("openworkflow_run_attribute", "name", "varchar(63)", "NOT NULL"),
    ("openworkflow_run_attribute", "str_value", "varchar(255)", "NULL"),
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
        ("django_openworkflow", "0019_narrower_run_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunAttribute",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("name", models.CharField(max_length=63)),
                ("int_value", models.BigIntegerField(blank=True, null=True)),
                ("str_value", models.CharField(blank=True, max_length=255, null=True)),
                ("decimal_value", models.DecimalField(blank=True, decimal_places=6, max_digits=15, null=True)),
                ("datetime_value", models.DateTimeField(blank=True, null=True)),
                (
                    "position",
                    models.IntegerField(
                        help_text="Where ctx.set_attribute stands in the run's execution (-1: set at the start); a replay's earlier position replaces nothing."
                    ),
                ),
                (
                    "workflow_run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attributes",
                        to="django_openworkflow.workflowrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "run attribute",
                "verbose_name_plural": "run attributes",
                "db_table": "openworkflow_run_attribute",
                "ordering": ["name"],
                "indexes": [
                    models.Index(fields=["name", "int_value"], name="owf_attr_int_idx"),
                    models.Index(fields=["name", "str_value"], name="owf_attr_str_idx"),
                    models.Index(fields=["name", "decimal_value"], name="owf_attr_decimal_idx"),
                    models.Index(fields=["name", "datetime_value"], name="owf_attr_datetime_idx"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("workflow_run", "name"), name="owf_attribute_run_name_uniq")
                ],
            },
        ),
        migrations.RunPython(mysql_forward, migrations.RunPython.noop, elidable=False),
    ]
