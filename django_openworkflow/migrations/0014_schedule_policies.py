"""Schedules choose what a tick does while their last run is unfinished, and keep one buffered tick.

Two columns on schedules, no data to move: ``overlap`` (``allow_all``, what
every schedule did before, is the default) and ``buffered_tick_at`` (the
tick a ``buffer_one`` schedule starts once its unfinished run ends).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0013_parent_close_policy"),
    ]

    operations = [
        migrations.AddField(
            model_name="schedule",
            name="buffered_tick_at",
            field=models.DateTimeField(
                blank=True,
                help_text="With overlap buffer_one: the tick whose run starts when the unfinished one ends.",
                null=True,
                verbose_name="buffered tick",
            ),
        ),
        migrations.AddField(
            model_name="schedule",
            name="overlap",
            field=models.CharField(
                default="allow_all",
                help_text="What a tick does while a run of the schedule is unfinished.",
                max_length=16,
                verbose_name="overlap",
            ),
        ),
    ]
