"""The HTTP API's tokens: one row per token, holding its SHA-256 and its first characters, never the token.

The table points to the user model, so it is created where the users are
(``routers.py``), even when the workflow tables are on an alias of their own.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_openworkflow", "0009_run_write_path"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "name",
                    models.CharField(help_text="What or who uses it, e.g. 'CI'.", max_length=255, verbose_name="name"),
                ),
                ("prefix", models.CharField(editable=False, max_length=16, unique=True, verbose_name="prefix")),
                ("digest", models.CharField(editable=False, max_length=64, verbose_name="SHA-256")),
                ("created_at", models.DateTimeField(auto_now_add=True, verbose_name="created at")),
                (
                    "last_used_at",
                    models.DateTimeField(
                        blank=True, editable=False, help_text="To the minute.", null=True, verbose_name="last used at"
                    ),
                ),
                (
                    "expires_at",
                    models.DateTimeField(
                        blank=True, help_text="Empty: valid until revoked.", null=True, verbose_name="expires at"
                    ),
                ),
                ("revoked_at", models.DateTimeField(blank=True, editable=False, null=True, verbose_name="revoked at")),
                (
                    "user",
                    models.ForeignKey(
                        help_text="Requests with the token act as this user, with this user's permissions.",
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="workflow_api_tokens",
                        to=settings.AUTH_USER_MODEL,
                        verbose_name="user",
                    ),
                ),
            ],
            options={
                "verbose_name": "API token",
                "verbose_name_plural": "API tokens",
                "db_table": "openworkflow_api_token",
                "ordering": ["-created_at"],
            },
        ),
    ]
