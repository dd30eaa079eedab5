"""The parent-close policy: what a parent's end does to its unfinished children.

Three columns with defaults, no data to move: ``parent_close_policy`` and
``closes_with`` (the run whose end applies it; not a foreign key, so pruning
a parent never touches its children) on the child, ``closes_children`` on
the parent (its end looks for children only when set), and an index on
``(closes_with, status)`` to find a parent's open children in one range.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0012_rerun_from_step"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflowrun",
            name="closes_children",
            field=models.BooleanField(
                default=False, editable=False, help_text="Whether it started children that its end cancels."
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="closes_with",
            field=models.UUIDField(
                blank=True,
                editable=False,
                help_text=(
                    "The run whose end applies the parent-close policy: the parent (or its continue-as-new successor)."
                ),
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="workflowrun",
            name="parent_close_policy",
            field=models.CharField(
                choices=[("abandon", "Abandon"), ("terminate", "Terminate"), ("request_cancel", "Request cancel")],
                default="abandon",
                help_text="What happens to this child run when its parent ends.",
                max_length=16,
            ),
        ),
        migrations.AddIndex(
            model_name="workflowrun",
            index=models.Index(fields=["closes_with", "status"], name="owf_run_closes_with_idx"),
        ),
    ]
