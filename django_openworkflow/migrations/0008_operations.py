"""Operations: retention fixed on each run, the trace context a run carries, indexes for pruning,
the dashboard and search by input.

Search by input is JSON containment (``input @> pattern``). Only PostgreSQL
can index it: a GIN index with ``jsonb_path_ops``. MySQL/MariaDB and SQLite
have no index for containment; their search scans the runs the other filters
leave. The DDL lives here, not in the backend class, because a migration must
keep doing what it did when it was written.
"""

from django.db import migrations, models


def create_input_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS owf_run_input_gin ON openworkflow_run USING gin (input jsonb_path_ops)"
        )


def drop_input_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS owf_run_input_gin")


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0007_workflow_language"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="retention",
            field=models.DurationField(
                blank=True,
                help_text="How long the run is kept once finished, fixed at start; empty: until deleted by hand.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(fields=["retention", "finished_at"], name="owf_run_retention_idx"),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(fields=["finished_at"], name="owf_run_finished_idx"),
        ),
        migrations.RunPython(create_input_index, drop_input_index, elidable=False),
    ]
