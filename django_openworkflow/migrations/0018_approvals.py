"""Approvals (``ctx.wait_for_approval``): one new table, no data to move."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0017_run_progress_and_streams"),
    ]

    operations = [
        migrations.CreateModel(
            name="Approval",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("step_key", models.CharField(max_length=255)),
                ("name", models.CharField(max_length=255)),
                ("details", models.TextField(blank=True, default="")),
                ("assignees", models.JSONField(default=dict)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "open"),
                            ("approved", "approved"),
                            ("rejected", "rejected"),
                            ("timed_out", "timed out"),
                        ],
                        default="open",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField()),
                ("timeout_at", models.DateTimeField()),
                ("decided_by", models.CharField(blank=True, default="", max_length=150)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                ("comment", models.TextField(blank=True, default="")),
                (
                    "attempt",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="django_openworkflow.stepattempt",
                    ),
                ),
                (
                    "workflow_run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="approvals",
                        to="django_openworkflow.workflowrun",
                    ),
                ),
            ],
            options={
                "verbose_name": "approval",
                "verbose_name_plural": "inbox",
                "db_table": "openworkflow_approval",
                "ordering": ["id"],
                "indexes": [models.Index(fields=["status", "id"], name="owf_approval_status_idx")],
                "constraints": [
                    models.UniqueConstraint(fields=("workflow_run", "step_key"), name="owf_approval_run_step_uniq")
                ],
            },
        ),
    ]
