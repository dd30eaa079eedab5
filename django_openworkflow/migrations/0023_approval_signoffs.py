"""Sign-off by several people (``ctx.wait_for_approval(approvals_required=N, exclude=[...])``): three columns.

An approval already open needs one approval, excludes nobody and has no
sign-off yet: the defaults, so no data to move.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0022_task_forms"),
    ]

    operations = [
        migrations.AddField(
            model_name="approval",
            name="required",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AddField(
            model_name="approval",
            name="excluded",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AddField(
            model_name="approval",
            name="signoffs",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
