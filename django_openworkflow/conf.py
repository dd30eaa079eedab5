"""The ``OPENWORKFLOW`` settings dict, read at access time.

Nothing is copied at import time, so ``override_settings(OPENWORKFLOW=...)``
works in tests. Durations accept the same strings as ``ctx.step.sleep``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings

from .durations import parse_duration

DEFAULTS: dict[str, Any] = {
    # Database alias holding the workflow tables.
    "DATABASE": "default",
    # How long a claimed run stays leased without a heartbeat.
    "LEASE": "30s",
    # How often an idle worker looks for due runs.
    "POLL_INTERVAL": "100ms",
    # On SIGTERM, how long a worker waits for its slices to finish before it
    # releases what is still running to other workers and exits.
    "DRAIN_TIMEOUT": "30s",
    # Worker slots (threads) per `runworkflows` process.
    "CONCURRENCY": 10,
    # A run may record at most this many step attempts.
    "MAX_STEP_ATTEMPTS": 1000,
    # Largest encoded JSON payload (input, step output, run output).
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    # Module imported from every installed app at startup.
    "AUTODISCOVER_MODULE": "workflows",
    # The dotted path of a django_openworkflow.dispatch.Dispatcher subclass, or
    # a short name: "worker" (runworkflows processes poll/LISTEN) or "celery"
    # (starting a run also sends a Celery task, see dispatch/celery.py).
    "DISPATCH": "worker",
    # Celery queue for workflow tasks (DISPATCH = "celery").
    "CELERY_QUEUE": "workflows",
}


class Settings:
    """Typed view of ``settings.OPENWORKFLOW`` with defaults filled in."""

    def _get(self, key: str) -> Any:
        user = getattr(django_settings, "OPENWORKFLOW", None) or {}
        return user.get(key, DEFAULTS[key])

    @property
    def database(self) -> str:
        return str(self._get("DATABASE"))

    @property
    def lease(self) -> timedelta:
        return parse_duration(self._get("LEASE"))

    @property
    def poll_interval(self) -> timedelta:
        return parse_duration(self._get("POLL_INTERVAL"))

    @property
    def drain_timeout(self) -> timedelta:
        return parse_duration(self._get("DRAIN_TIMEOUT"))

    def _positive_int(self, key: str) -> int:
        value = self._get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"OPENWORKFLOW[{key!r}] must be a whole number of at least 1, got {value!r:.60}")
        return value

    @property
    def concurrency(self) -> int:
        return self._positive_int("CONCURRENCY")

    @property
    def max_step_attempts(self) -> int:
        return self._positive_int("MAX_STEP_ATTEMPTS")

    @property
    def max_payload_bytes(self) -> int:
        return self._positive_int("MAX_PAYLOAD_BYTES")

    @property
    def autodiscover_module(self) -> str:
        return str(self._get("AUTODISCOVER_MODULE"))

    @property
    def dispatch(self) -> str:
        return str(self._get("DISPATCH"))

    @property
    def celery_queue(self) -> str:
        return str(self._get("CELERY_QUEUE"))

    def unknown_keys(self) -> list[str]:
        user = getattr(django_settings, "OPENWORKFLOW", None) or {}
        return sorted(set(user) - set(DEFAULTS))


owf_settings = Settings()
