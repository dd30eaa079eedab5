"""The ``OPENWORKFLOW`` settings dict, read at access time.

Nothing is copied at import time, so ``override_settings(OPENWORKFLOW=...)``
works in tests. Durations accept the same strings as ``ctx.step.sleep``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings as django_settings

from .durations import parse_duration

PRIORITY_RANGE = (-1000, 1000)
"""The priorities a run may have (``definitions/flow.py`` checks declarations against it)."""

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
    # Runs a worker claims ahead of its free slots, so that a slot that finishes finds its next
    # run waiting instead of waiting for a claim (0: claim only for free slots).
    "PREFETCH": 0,
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
    # Retention (retention.py): how long a finished run is kept when neither
    # its workflow nor its start says; None keeps runs until deleted by hand.
    # Events older than this are deleted too.
    "RETENTION": None,
    # The longest retention a run may get (None: no ceiling).
    "MAX_RETENTION": None,
    # Runs deleted per transaction by `workflows prune` and the workers' sweep.
    "PRUNE_BATCH_SIZE": 500,
    # How often runworkflows workers prune (one of them at a time); None or 0: never.
    "PRUNE_INTERVAL": "5m",
    # Queues claimed fairly (docs/howto/flow-control.md "Fairness"): runs of different fairness keys
    # take turns instead of the oldest first, so a flood under one key cannot starve the others.
    "FAIR_QUEUES": [],
    # In a fair queue, a key's waiting runs are placed in line at least this far apart.
    "FAIRNESS_QUANTUM": "1s",
    # Priority aging (docs/howto/flow-control.md "Priority aging"): {"every": "30s", "ceiling": 10} raises a
    # run waiting due in its queue by one priority level per interval waited, up to the ceiling; None: strict.
    "PRIORITY_AGING": None,
    # Mail ADMINS when a run fails, at most once per workflow per this duration (alerts.py); None: never.
    "MAIL_ADMINS_ON_FAILURE": None,
    # The site's address ("https://example.com"), for absolute links to run pages in mails.
    "SITE_URL": None,
    # Called when a run opens an approval (alerts.py); the default mails the assignees. None: nothing.
    "APPROVAL_NOTIFY": "django_openworkflow.alerts.mail_assignees",
    # How often runworkflows workers look for human tasks' reminders and escalations that are due (one of
    # them at a time, worker/task_timers.py); None or 0: never (fire_task_timers() by hand then).
    "TASK_TIMERS_INTERVAL": "1m",
    # The permission ("app_label.codename") that lets a user release a task someone else holds and reassign
    # any task (client/human_tasks.py); superusers may anyway.
    "TASK_REASSIGN_PERMISSION": "django_openworkflow.reassign_approval",
    # -- Payload encryption (docs/howto/encryption.md, encryption.py) --
    # Fernet keys (the `encryption` extra): the first encrypts new payloads, every one decrypts. None: off.
    "PAYLOAD_ENCRYPTION": None,
    # With PAYLOAD_ENCRYPTION: whether errors' messages and tracebacks are encrypted too (their type stays in clear).
    "ENCRYPT_ERRORS": True,
    # -- Large payloads (docs/howto/large-payloads.md, offload.py) --
    # Payloads whose JSON text is at least this many bytes are stored compressed (zlib). None: never.
    "PAYLOAD_COMPRESSION": None,
    # {"STORAGE": <an alias of settings.STORAGES>, "THRESHOLD": <bytes>}: payloads whose stored form is at least
    # THRESHOLD bytes are written to a file of that storage, the row keeps a reference. None: never.
    "PAYLOAD_OFFLOAD": None,
    # -- Human tasks' files (docs/howto/human-tasks.md "File fields", task_files.py) --
    # The alias of settings.STORAGES a task form's uploaded files are saved to, under openworkflow/task-files/.
    "TASK_FILES_STORAGE": "default",
    # The largest file (bytes) a task's form takes, through every door; None: no limit of ours.
    "TASK_FILE_MAX_BYTES": 10 * 1024 * 1024,
    # -- Telemetry (docs/operations-telemetry.md) --
    # Prometheus metrics (the `prometheus` extra): count runs, steps and signals in this process.
    "METRICS": False,
    # When set, /metrics answers only requests with "Authorization: Bearer <token>" (or a staff session).
    "METRICS_TOKEN": None,
    # OpenTelemetry traces (the `otel` extra): spans for slices, steps and signals.
    "TRACING": False,
    # -- Admin --
    # How often the run page, the run list and the dashboard refresh themselves in the browser
    # (seconds; 0: never, the pages stay as served).
    "ADMIN_LIVE_SECONDS": 10,
}


@dataclass(frozen=True)
class PriorityAging:
    """``OPENWORKFLOW["PRIORITY_AGING"]``, checked: one level gained per ``every`` waited, up to ``ceiling``."""

    every: timedelta
    ceiling: int


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
    def prefetch(self) -> int:
        value = self._get("PREFETCH")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"OPENWORKFLOW['PREFETCH'] must be a whole number of at least 0, got {value!r:.60}")
        return value

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

    @property
    def prune_batch_size(self) -> int:
        return self._positive_int("PRUNE_BATCH_SIZE")

    @property
    def fair_queues(self) -> frozenset[str]:
        queues = self._get("FAIR_QUEUES")
        if not isinstance(queues, list | tuple | set | frozenset | None) or not all(
            isinstance(queue, str) for queue in queues or ()
        ):
            raise ValueError(f"OPENWORKFLOW['FAIR_QUEUES'] must be a list of queue names, got {queues!r:.60}")
        return frozenset(queues or ())

    @property
    def fairness_quantum(self) -> timedelta:
        try:
            quantum = parse_duration(self._get("FAIRNESS_QUANTUM"))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"OPENWORKFLOW['FAIRNESS_QUANTUM']: {exc}") from None
        if quantum <= timedelta(0):
            raise ValueError(f"OPENWORKFLOW['FAIRNESS_QUANTUM'] must be longer than zero, got {quantum}")
        return quantum

    @property
    def task_timers_interval(self) -> timedelta | None:
        """``TASK_TIMERS_INTERVAL``: how often the workers fire human tasks' timers; None when off (None or 0)."""
        value = self._get("TASK_TIMERS_INTERVAL")
        if value is None or value == 0:
            return None
        try:
            interval = parse_duration(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"OPENWORKFLOW['TASK_TIMERS_INTERVAL'] {value!r:.60} is not a valid interval "
                f"(a duration such as '1m', or None): {exc}"
            ) from None
        return interval if interval > timedelta(0) else None

    @property
    def priority_aging(self) -> PriorityAging | None:
        value = self._get("PRIORITY_AGING")
        if value is None:
            return None
        where = "OPENWORKFLOW['PRIORITY_AGING']"
        if not isinstance(value, dict) or set(value) != {"every", "ceiling"}:
            raise ValueError(
                f"{where} must be None or a dict with the keys 'every' and 'ceiling' only, "
                f'such as {{"every": "30s", "ceiling": 10}}, got {value!r:.80}'
            )
        try:
            every = parse_duration(value["every"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}['every']: {exc}") from None
        if every < timedelta(seconds=1):
            raise ValueError(f"{where}['every'] must be at least 1s (one level gained per interval), got {every}")
        ceiling, (low, high) = value["ceiling"], PRIORITY_RANGE
        if isinstance(ceiling, bool) or not isinstance(ceiling, int) or not low <= ceiling <= high:
            raise ValueError(
                f"{where}['ceiling'] must be a whole number from {low} to {high} (the highest priority aging "
                f"gives), got {ceiling!r:.60}"
            )
        return PriorityAging(every, ceiling)

    def raw(self, key: str) -> Any:
        """The setting as the user wrote it (retention.py parses the retention ones)."""
        return self._get(key)

    # -- Telemetry --

    @property
    def metrics(self) -> bool:
        return bool(self._get("METRICS"))

    @property
    def metrics_token(self) -> str | None:
        token = self._get("METRICS_TOKEN")
        if token is not None and (not isinstance(token, str) or not token):
            kind = type(token).__name__
            raise ValueError(f"OPENWORKFLOW['METRICS_TOKEN'] must be a non-empty string or None, got a {kind}")
        return token

    @property
    def tracing(self) -> bool:
        return bool(self._get("TRACING"))

    # -- Admin --

    @property
    def admin_live_seconds(self) -> int:
        value = self._get("ADMIN_LIVE_SECONDS")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(
                f"OPENWORKFLOW['ADMIN_LIVE_SECONDS'] must be a whole number of seconds, at least 0, got {value!r:.60}"
            )
        return value

    @property
    def task_reassign_permission(self) -> str:
        """``TASK_REASSIGN_PERMISSION``: the permission that lets a user release and reassign others' tasks."""
        value = self._get("TASK_REASSIGN_PERMISSION")
        app_label, _, codename = value.partition(".") if isinstance(value, str) else ("", "", "")
        if not app_label or not codename or "." in codename or value != value.strip():
            raise ValueError(
                "OPENWORKFLOW['TASK_REASSIGN_PERMISSION'] must be a permission as user.has_perm() names it, "
                f"'app_label.codename', got {value!r:.80}"
            )
        return str(value)

    @property
    def task_files_storage(self) -> str:
        """``TASK_FILES_STORAGE``: the ``STORAGES`` alias task forms' files are saved to."""
        value = self._get("TASK_FILES_STORAGE")
        storages = getattr(django_settings, "STORAGES", {}) or {}
        if not isinstance(value, str) or value not in storages:
            raise ValueError(
                f"OPENWORKFLOW['TASK_FILES_STORAGE'] must be an alias of settings.STORAGES "
                f"(it defines {', '.join(sorted(storages)) or 'nothing'}), got {value!r:.60}"
            )
        return value

    @property
    def task_file_max_bytes(self) -> int | None:
        """``TASK_FILE_MAX_BYTES``: the largest file a task's form takes, or None."""
        if self._get("TASK_FILE_MAX_BYTES") is None:
            return None
        return self._positive_int("TASK_FILE_MAX_BYTES")

    def unknown_keys(self) -> list[str]:
        user = getattr(django_settings, "OPENWORKFLOW", None) or {}
        return sorted(set(user) - set(DEFAULTS))


owf_settings = Settings()
