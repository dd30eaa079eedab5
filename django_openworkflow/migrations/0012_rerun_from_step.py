"""Re-runs keep a link to the run they re-run, and a re-run from a step marks the journal rows it copied.

Three nullable columns, no data to move: ``rerun_of`` and ``rerun_from_step``
on runs, ``copied_from`` (the source attempt's id, not a foreign key: the
source may be pruned first) on step attempts.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0011_workers_and_queues"),
    ]

    operations = [
        migrations.AddField(
            model_name="stepattempt",
            name="copied_from",
            field=models.BigIntegerField(
                blank=True,
                editable=False,
                help_text="In a re-run from a step: the id of the attempt of the source run this row copies.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="rerun_from_step",
            field=models.CharField(
                blank=True,
                help_text="The step this re-run starts from: the steps before it were copied from the run it re-runs.",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="rerun_of",
            field=models.ForeignKey(
                blank=True,
                help_text="The run this one re-runs with the same input (a re-run, or a re-run from a step).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reruns",
                to="django_openworkflow.workflowrun",
            ),
        ),
    ]
