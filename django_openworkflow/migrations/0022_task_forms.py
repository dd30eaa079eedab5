"""Human tasks with a form (``ctx.wait_for_input``): four columns on the approvals, and their new status.

A yes/no approval keeps ``form`` empty, so the approvals already open are
left as they are; no data to move.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0021_priority_aging"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="form",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.AddField(
            model_name="approval",
            name="form_fields",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="approval",
            name="initial",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="due_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="approval",
            name="status",
            field=models.CharField(
                choices=[
                    ("open", "open"),
                    ("approved", "approved"),
                    ("rejected", "rejected"),
                    ("submitted", "submitted"),
                    ("timed_out", "timed out"),
                ],
                default="open",
                max_length=16,
            ),
        ),
    ]
