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
    durations = (
        ("LEASE", lambda: owf_settings.lease),
        ("POLL_INTERVAL", lambda: owf_settings.poll_interval),
        ("DRAIN_TIMEOUT", lambda: owf_settings.drain_timeout),
    )
    for key, read in durations:
        try:
            read()
        except ValueError as exc:
            messages.append(checks.Error(f"OPENWORKFLOW[{key!r}]: {exc}", id="openworkflow.E002"))
    for read_int in (
        lambda: owf_settings.concurrency,
        lambda: owf_settings.max_step_attempts,
        lambda: owf_settings.max_payload_bytes,
    ):
        try:
            read_int()
        except ValueError as exc:
            messages.append(checks.Error(str(exc), id="openworkflow.E005"))
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
