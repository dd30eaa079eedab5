"""Erasure by subject (``forget``): when a run's payloads were erased, and by whom (store/erasure.py).

Two nullable columns, so adding them rewrites no row on any database.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_openworkflow", "0023_approval_signoffs")]

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="erased_at",
            field=models.DateTimeField(
                blank=True, editable=False, help_text="When its payloads were erased (forget).", null=True
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="erased_by",
            field=models.CharField(
                blank=True, editable=False, help_text="Who erased its payloads.", max_length=150, null=True
            ),
        ),
    ]
