"""Priority aging: a run's declared priority, kept while the aging sweep raises ``priority`` (store/aging.py).

The column is NULL unless the run was aged, and the sweep finds the aged
runs again through a partial index of the non-NULL ones. MySQL and MariaDB
ignore an index's condition (Django creates none there), so they get a plain
index on the column, as 0005 does for the claim.
"""

from django.db import migrations, models


def mysql_index(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute("CREATE INDEX `owf_run_aged_plain_idx` ON `openworkflow_run` (`declared_priority`)")


def drop_mysql_index(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        schema_editor.execute("DROP INDEX `owf_run_aged_plain_idx` ON `openworkflow_run`")


class Migration(migrations.Migration):
    dependencies = [("django_openworkflow", "0020_run_attributes")]
    # MySQL cannot roll DDL back: no transaction around its part (a no-op elsewhere).
    atomic = False

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="declared_priority",
            field=models.SmallIntegerField(
                blank=True,
                editable=False,
                help_text="The priority it was started with, while aging raised it.",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(
                condition=models.Q(("declared_priority__isnull", False)),
                fields=["declared_priority"],
                name="owf_run_aged_idx",
            ),
        ),
        migrations.RunPython(mysql_index, drop_mysql_index),
    ]
