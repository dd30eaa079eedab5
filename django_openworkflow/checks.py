"""System checks: settings that would make workers misbehave are reported at startup."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from .conf import DEFAULTS, owf_settings
from .store import get_backend


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
    try:
        backend = get_backend()
    except ImproperlyConfigured as exc:
        messages.append(checks.Error(str(exc), id="openworkflow.E004"))
        return messages
    messages.extend(backend.check())
    return messages
