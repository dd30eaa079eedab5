"""What runs publish and stream: the latest value per (run, key), and chunks unique per (run, stream, offset).

Two new tables, both deleted with their run; no data to move.
"""

import django.core.serializers.json
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0016_run_subjects"),
    ]

    operations = [
        migrations.CreateModel(
            name="PublishedValue",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("key", models.CharField(max_length=255)),
                (
                    "value",
                    models.JSONField(blank=True, encoder=django.core.serializers.json.DjangoJSONEncoder, null=True),
                ),
                (
                    "position",
                    models.PositiveIntegerField(
                        help_text="Where the publish stands in the run's execution; a replay's earlier position replaces nothing."
                    ),
                ),
                ("updated_at", models.DateTimeField()),
                (
                    "workflow_run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="published_values",
                        to="django_openworkflow.workflowrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "published value",
                "verbose_name_plural": "published values",
                "db_table": "openworkflow_published_value",
                "ordering": ["key"],
                "constraints": [
                    models.UniqueConstraint(fields=("workflow_run", "key"), name="owf_published_run_key_uniq")
                ],
            },
        ),
        migrations.CreateModel(
            name="StreamChunk",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("stream", models.CharField(max_length=255)),
                ("offset", models.PositiveIntegerField(help_text="The chunk's place in its stream, from 0.")),
                (
                    "data",
                    models.JSONField(blank=True, encoder=django.core.serializers.json.DjangoJSONEncoder, null=True),
                ),
                ("created_at", models.DateTimeField()),
                (
                    "workflow_run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="stream_chunks",
                        to="django_openworkflow.workflowrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "stream chunk",
                "verbose_name_plural": "stream chunks",
                "db_table": "openworkflow_stream_chunk",
                "ordering": ["stream", "offset"],
                "constraints": [
                    models.UniqueConstraint(fields=("workflow_run", "stream", "offset"), name="owf_stream_chunk_uniq")
                ],
            },
        ),
    ]
