"""System checks: settings that would make workers misbehave are reported at startup."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.db import connections

from .conf import DEFAULTS, owf_settings


@checks.register(checks.Tags.compatibility)
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    unknown = owf_settings.unknown_keys()
    if unknown:
        messages.append(
            checks.Error(
                f"OPENWORKFLOW has unknown keys: {', '.join(unknown)}",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="openworkflow.E001",
            )
        )
    for key, read in (("LEASE", lambda: owf_settings.lease), ("POLL_INTERVAL", lambda: owf_settings.poll_interval)):
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(f"OPENWORKFLOW[{key!r}]: {exc}", id="openworkflow.E002"))
    if owf_settings.database not in settings.DATABASES:
        messages.append(
            checks.Error(
                f"OPENWORKFLOW['DATABASE'] is {owf_settings.database!r}, which is not in DATABASES",
                id="openworkflow.E003",
            )
        )
        return messages
    conn = connections[owf_settings.database]
    if conn.vendor == "sqlite":
        options = conn.settings_dict.get("OPTIONS", {})
        init = str(options.get("init_command", "")).lower()
        if options.get("transaction_mode") != "IMMEDIATE" or "journal_mode=wal" not in init.replace(" ", ""):
            messages.append(
                checks.Warning(
                    "SQLite database used by django-openworkflow is not set up for several processes",
                    hint=(
                        'Set OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 20, '
                        '"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"} '
                        "so that workers and web processes wait for the write lock instead of failing."
                    ),
                    id="openworkflow.W001",
                )
            )
    return messages
