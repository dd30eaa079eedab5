"""Workflow definitions: ``@workflow`` and the name/version registry."""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .durations import Duration
from .engine.retry import DEFAULT_STEP_RETRY_POLICY, DEFAULT_WORKFLOW_RETRY_POLICY, RetryPolicy
from .errors import PayloadError, UnknownWorkflowError, WorkflowRegistrationError

if TYPE_CHECKING:
    from .client import RunHandle
    from .engine.context import WorkflowContext

WorkflowFunction = Callable[["WorkflowContext"], Any]


def _where(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


@dataclass(frozen=True)
class WorkflowSpec:
    """A registered workflow: its name, version, function and policies.

    Returned by :func:`workflow`; call :meth:`run` to start a run.
    """

    name: str
    version: str | None
    fn: WorkflowFunction
    retry_policy: RetryPolicy = DEFAULT_WORKFLOW_RETRY_POLICY
    step_retry_policy: RetryPolicy = DEFAULT_STEP_RETRY_POLICY

    def run(
        self,
        input: Any = None,
        *,
        version: str | None = None,
        available_at: datetime | Duration | None = None,
        deadline_at: datetime | Duration | None = None,
        idempotency_key: str | None = None,
    ) -> RunHandle:
        """Start a run of this workflow (of ``version`` if given, else this spec's).

        The run is inserted in the current transaction: inside
        ``transaction.atomic()`` it exists only if that transaction commits.
        """
        from .client import start_run

        return start_run(
            self.name,
            input,
            version=self.version if version is None else version,
            available_at=available_at,
            deadline_at=deadline_at,
            idempotency_key=idempotency_key,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"workflow {self.name!r} is not called directly; start it with {self.fn.__name__}.run(input)")


def _version_sort_key(version: str | None) -> tuple[Any, ...]:
    """Natural order: None < 'v1' < 'v2' < 'v10'."""
    if version is None:
        return ()
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", version) if part)


class WorkflowRegistry:
    """Maps (name, version) to :class:`WorkflowSpec`.

    ``_registry`` is a flat dict so that Django's ``autodiscover_modules``
    can snapshot and restore it when a ``workflows.py`` fails to import.
    """

    def __init__(self) -> None:
        self._registry: dict[tuple[str, str | None], WorkflowSpec] = {}
        self._lock = threading.Lock()

    def register(self, spec: WorkflowSpec) -> WorkflowSpec:
        key = (spec.name, spec.version)
        with self._lock:
            existing = self._registry.get(key)
            if existing is not None and _where(existing.fn) != _where(spec.fn):
                raise WorkflowRegistrationError(
                    f"workflow {spec.name!r} version {spec.version!r} is defined twice: "
                    f"in {_where(existing.fn)} and in {_where(spec.fn)}"
                )
            self._registry[key] = spec
        return spec

    def unregister(self, name: str, version: str | None) -> None:
        with self._lock:
            self._registry.pop((name, version), None)

    def get(self, name: str, version: str | None) -> WorkflowSpec | None:
        return self._registry.get((name, version))

    def latest(self, name: str) -> WorkflowSpec:
        """The highest registered version of ``name`` (natural sort: v2 < v10)."""
        candidates = [spec for (n, _), spec in self._registry.items() if n == name]
        if not candidates:
            raise UnknownWorkflowError(f"no workflow named {name!r} is registered")
        return max(candidates, key=lambda spec: _version_sort_key(spec.version))

    def all(self) -> list[WorkflowSpec]:
        return sorted(self._registry.values(), key=lambda s: (s.name, _version_sort_key(s.version)))


registry = WorkflowRegistry()


def workflow(
    fn: WorkflowFunction | None = None,
    *,
    name: str | None = None,
    version: str | None = None,
    retry_policy: RetryPolicy | None = None,
    step_retry_policy: RetryPolicy | None = None,
) -> Any:
    """Declare a durable workflow: ``@workflow`` or ``@workflow(name=..., version=...)``.

    The function takes one argument, the :class:`WorkflowContext`, and returns
    a JSON-serializable value. ``name`` defaults to the function's name.
    """

    def decorate(func: WorkflowFunction) -> WorkflowSpec:
        if not callable(func):
            raise WorkflowRegistrationError(f"@workflow needs a function, got {func!r}")
        if inspect.isgeneratorfunction(func) or inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
            raise WorkflowRegistrationError(
                f"workflow {_where(func)} must be a plain function (not a generator or async function)"
            )
        wf_name = func.__name__ if name is None else name
        if not isinstance(wf_name, str) or not wf_name or len(wf_name) > 255:
            raise WorkflowRegistrationError(
                f"workflow name must be a non-empty string of at most 255 characters, got {wf_name!r}"
            )
        if version is not None and (not isinstance(version, str) or not version or len(version) > 255):
            raise WorkflowRegistrationError(
                f"workflow version must be None or a non-empty string of at most 255 characters, got {version!r}"
            )
        from .payload import check_text  # not at import time: settings may import this package

        for label, text in (("name", wf_name), ("version", version)):
            try:
                check_text(text or "", f"workflow {label}")
            except PayloadError as exc:
                raise WorkflowRegistrationError(str(exc)) from None
        for label, policy in (("retry_policy", retry_policy), ("step_retry_policy", step_retry_policy)):
            if policy is not None and not isinstance(policy, RetryPolicy):
                raise WorkflowRegistrationError(f"{label} must be a RetryPolicy, got {policy!r}")
        spec = WorkflowSpec(
            name=wf_name,
            version=version,
            fn=func,
            retry_policy=retry_policy or DEFAULT_WORKFLOW_RETRY_POLICY,
            step_retry_policy=step_retry_policy or DEFAULT_STEP_RETRY_POLICY,
        )
        return registry.register(spec)

    if fn is not None:
        return decorate(fn)
    return decorate
