"""Turning metrics and tracing on at startup, and the system checks of their settings.

The app's ``ready()`` calls :func:`setup`: it enables what
``OPENWORKFLOW["METRICS"]`` and ``OPENWORKFLOW["TRACING"]`` ask for. An
extra that is missing does not stop the process (a web server runs no
system checks): it is logged here, reported by the checks below, and
``/metrics`` answers 501 naming the extra.
"""

from __future__ import annotations

import logging
from typing import Any

from django.core import checks

from . import metrics, tracing
from .conf import owf_settings

logger = logging.getLogger("django_openworkflow.telemetry")


def setup() -> None:
    """Enable metrics and tracing in this process as the settings say."""
    for wanted, enable in ((owf_settings.metrics, metrics.enable), (owf_settings.tracing, tracing.enable)):
        if wanted:
            try:
                enable()
            except ImportError as exc:
                logger.error("%s", exc)


@checks.register(checks.Tags.compatibility)
def check_telemetry(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    messages: list[checks.CheckMessage] = []
    if owf_settings.metrics and not metrics.available():
        messages.append(
            checks.Error(
                "OPENWORKFLOW['METRICS'] is on but prometheus-client is not installed",
                hint=metrics.PROMETHEUS_EXTRA,
                id="openworkflow.E070",
            )
        )
    if owf_settings.tracing and not tracing.available():
        messages.append(
            checks.Error(
                "OPENWORKFLOW['TRACING'] is on but opentelemetry-api is not installed",
                hint=tracing.OTEL_EXTRA,
                id="openworkflow.E071",
            )
        )
    try:
        owf_settings.metrics_token  # noqa: B018  (read to validate)
    except ValueError as exc:
        messages.append(checks.Error(str(exc), id="openworkflow.E072"))
    return messages
