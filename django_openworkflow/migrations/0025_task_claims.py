"""Who works on a human task, and its timers (issue 43): claims, the activity log, reminders, escalation.

Eight columns with empty defaults (an open task is unclaimed, has no timer
and no activity yet) and the ``reassign_approval`` permission; no data to move.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0024_run_erasure"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="approval",
            options={
                "ordering": ["id"],
                "permissions": [("reassign_approval", "Can release and reassign any human task")],
                "verbose_name": "approval",
                "verbose_name_plural": "inbox",
            },
        ),
        migrations.AddField(
            model_name="approval",
            name="claimed_by",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
        migrations.AddField(
            model_name="approval",
            name="claimed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="activity",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="approval",
            name="remind_every",
            field=models.DurationField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="next_remind_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="escalate_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="approval",
            name="escalate_to",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="approval",
            name="escalated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
