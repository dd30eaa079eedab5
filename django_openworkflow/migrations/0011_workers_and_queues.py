"""The workers' heartbeat rows (``openworkflow_worker``) and the queues' paused state (``openworkflow_queue``).

Both live on the workflow alias, with the runs: the admin, the metrics and
the workers read them beside the runs they describe.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0010_api_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="QueueState",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=64, unique=True, verbose_name="queue")),
                ("paused", models.BooleanField(default=False, verbose_name="paused")),
                ("changed_at", models.DateTimeField(verbose_name="changed at")),
                ("changed_by", models.CharField(blank=True, default="", max_length=255, verbose_name="changed by")),
            ],
            options={
                "verbose_name": "queue",
                "verbose_name_plural": "queues",
                "db_table": "openworkflow_queue",
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="WorkerProcess",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("worker_id", models.CharField(max_length=64, unique=True, verbose_name="worker id")),
                ("host", models.CharField(max_length=255, verbose_name="host")),
                ("pid", models.IntegerField(verbose_name="pid")),
                (
                    "version",
                    models.CharField(help_text="django-openworkflow's.", max_length=64, verbose_name="version"),
                ),
                (
                    "queues",
                    models.JSONField(default=list, help_text='The queues it serves; "*": all.', verbose_name="queues"),
                ),
                ("slots_busy", models.IntegerField(default=0, verbose_name="busy slots")),
                ("slots_total", models.IntegerField(default=0, verbose_name="slots")),
                (
                    "heartbeat_seconds",
                    models.FloatField(help_text="Seconds between heartbeats.", verbose_name="heartbeat"),
                ),
                ("started_at", models.DateTimeField(verbose_name="started at")),
                ("last_seen_at", models.DateTimeField(db_index=True, verbose_name="last seen at")),
                (
                    "stopped_at",
                    models.DateTimeField(
                        blank=True, help_text="Set when it stopped cleanly.", null=True, verbose_name="stopped at"
                    ),
                ),
            ],
            options={
                "verbose_name": "worker",
                "verbose_name_plural": "workers",
                "db_table": "openworkflow_worker",
                "ordering": ["-last_seen_at"],
            },
        ),
    ]
