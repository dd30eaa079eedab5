"""Workflow definitions: the declared workflow (``WorkflowSpec``) and the name/version registry."""

from __future__ import annotations

import difflib
import inspect
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from ..conf import owf_settings
from ..durations import Duration
from ..errors import InvalidArgument, UnknownWorkflowError, WorkflowRegistrationError
from .alerts import RunFailure
from .attributes import AttributeCondition, check_value, declared_type, parse_value, split_lookup
from .children import ParentClosePolicy
from .flow import (
    DEFAULT_QUEUE,
    Concurrency,
    Debounce,
    KeyFunction,
    OnEvent,
    RateLimit,
    Schedule,
    check_priority,
    check_queue,
    resolve_key,
)
from .retention import parse_retention, resolve_retention
from .retry import DEFAULT_STEP_RETRY_POLICY, DEFAULT_WORKFLOW_RETRY_POLICY, RetryPolicy

if TYPE_CHECKING:
    from ..client.handle import RunHandle

WorkflowFunction = Callable[[Any], Any]
"""A workflow function: called with the run's context, it returns the run's output.

The context is the engine's ``WorkflowContext`` (``AsyncWorkflowContext`` for
an ``async def``); the registry holds the function and never calls it, so it
names no engine type.
"""


class RunStarter(Protocol):
    """What starts runs for ``spec.run()`` and ``spec.run_many()``: the client module, which hands itself in.

    The client looks workflows up here, so the registry does not import the
    client back: ``client/runs.py`` calls :func:`install_client` when it is
    imported, and the app's ``ready()`` imports it.
    """

    start_run: Callable[..., RunHandle]
    start_runs: Callable[..., list[RunHandle]]


# Written once, by the client module's import (under the import lock), then only read.
_installed_client: RunStarter | None = None


def install_client(client: RunStarter) -> None:
    """Let ``spec.run()`` start runs through ``client`` (the client module, as it is imported)."""
    global _installed_client
    _installed_client = client


def _client() -> RunStarter:
    if _installed_client is None:
        raise ImproperlyConfigured(
            "spec.run() needs the django_openworkflow app: add 'django_openworkflow' to INSTALLED_APPS "
            "(its ready() loads the client that starts runs)"
        )
    return _installed_client


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
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    concurrency: Concurrency | None = None
    rate_limit: RateLimit | None = None
    debounce: Debounce | None = None
    fairness_key: KeyFunction | str | None = None
    schedule: Schedule | None = None
    on_event: tuple[OnEvent, ...] = ()
    step_timeout: Duration | None = None
    compensate_on_cancel: bool = False
    retention: timedelta | None = None
    on_failure: Callable[[RunFailure], Any] | None = None
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.ABANDON
    """What happens to the children its runs start when the run ends (a child start may say otherwise)."""
    attributes: dict[str, type] = field(default_factory=dict, hash=False)
    """The typed attributes its runs may have: name to ``int``, ``str``, ``Decimal`` or ``datetime``."""

    @property
    def is_async(self) -> bool:
        """An ``async def`` workflow: run on an event loop, its ``ctx.step`` methods awaited."""
        return inspect.iscoroutinefunction(self.fn)

    def run(
        self,
        input: Any = None,
        *,
        version: str | None = None,
        available_at: datetime | Duration | None = None,
        deadline_at: datetime | Duration | None = None,
        idempotency_key: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        debounce_key: str | None = None,
        retention: Duration | None = None,
        subject: Any = None,
        attributes: dict[str, Any] | None = None,
    ) -> RunHandle:
        """Start a run of this workflow (of ``version`` if given, else this spec's).

        The run is inserted in the current transaction: inside
        ``transaction.atomic()`` it exists only if that transaction commits.
        ``queue`` and ``priority`` override the declaration for this run;
        ``concurrency_key`` and ``debounce_key`` give the key instead of the
        declared key function. ``subject`` links the run to a saved model
        instance: ``runs_for(order)`` lists it, the admin shows it on the
        object's page (``WorkflowRunsMixin``). ``attributes`` gives values of
        the declared attributes (``{"region": "eu"}``), written with the run.
        """
        return _client().start_run(
            self.name,
            input,
            version=self.version if version is None else version,
            available_at=available_at,
            deadline_at=deadline_at,
            idempotency_key=idempotency_key,
            queue=queue,
            priority=priority,
            concurrency_key=concurrency_key,
            debounce_key=debounce_key,
            retention=retention,
            subject=subject,
            attributes=attributes,
        )

    def run_many(
        self,
        inputs: Iterable[Any],
        *,
        idempotency_keys: Sequence[str | None] | None = None,
        available_at: datetime | Duration | None = None,
        deadline_at: datetime | Duration | None = None,
        queue: str | None = None,
        priority: int | None = None,
        retention: Duration | None = None,
        subjects: Sequence[Any] | None = None,
        attributes: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[RunHandle]:
        """Start one run per input, in a few statements; their handles, in order (see ``client.start_runs``).

        ``subjects``: one saved model instance per input (``None`` for none), each run's subject.
        ``attributes``: one dict of attribute values per input (``None`` for none).
        """
        return _client().start_runs(
            self.name,
            inputs,
            version=self.version,
            idempotency_keys=idempotency_keys,
            available_at=available_at,
            deadline_at=deadline_at,
            queue=queue,
            priority=priority,
            retention=retention,
            subjects=subjects,
            attributes=attributes,
        )

    def flow_fields(
        self,
        input: Any,
        *,
        queue: str | None = None,
        priority: int | None = None,
        concurrency_key: str | None = None,
        retention: Duration | None = None,
    ) -> dict[str, Any]:
        """The run's flow-control columns for a start with ``input`` (and this start's overrides).

        Every start goes through here (runs, children, successors, event and
        scheduled starts), so each run gets its retention fixed here too.
        """
        where = f"run of workflow {self.name!r}"
        try:
            override = parse_retention(retention, f"{where}: retention")
            kept = resolve_retention(override, self.retention)
        except ValueError as exc:
            raise InvalidArgument(str(exc), "retention") from None
        fields: dict[str, Any] = {
            "queue": self.queue if queue is None else check_queue(queue, where),
            "priority": self.priority if priority is None else check_priority(priority, where),
            "retention": kept,
        }
        if self.concurrency is not None:
            key = self.concurrency.key if concurrency_key is None else concurrency_key
            fields["concurrency_key"] = resolve_key(key, input, self.name, "concurrency_key")
            fields["concurrency_limit"] = self.concurrency.limit
            fields["concurrency_counts_parked"] = self.concurrency.count_parked
        elif concurrency_key is not None:
            raise InvalidArgument(
                f"{where}: concurrency_key given, but the workflow declares no concurrency", "concurrency_key"
            )
        if fields["queue"] in owf_settings.fair_queues:
            # In a fair queue every run has a key: the declared one, else its concurrency key, else the workflow.
            fair = self.fairness_key
            fields["fairness_key"] = (
                resolve_key(fair, input, self.name, "fairness_key")
                if fair is not None
                else fields.get("concurrency_key", self.name)
            )
        if self.rate_limit is not None:
            fields["rate_key"] = resolve_key(self.rate_limit.key, input, self.name, "rate_limit key")
            fields["rate_limit"] = self.rate_limit.limit
            fields["rate_period"] = self.rate_limit.period.total_seconds()
        return fields

    def debounce_key_for(self, input: Any, debounce_key: str | None = None) -> str | None:
        """The debounce key of a start, or None when the workflow does not debounce."""
        if self.debounce is None:
            if debounce_key is not None:
                raise InvalidArgument(
                    f"workflow {self.name!r}: debounce_key given, but it declares no debounce", "debounce_key"
                )
            return None
        return resolve_key(
            self.debounce.key if debounce_key is None else debounce_key, input, self.name, "debounce key"
        )

    def attribute_values(self, values: Any, where: str) -> dict[str, tuple[type, Any]]:
        """Start-time attribute values checked against the declaration: ``{name: (type, value)}``.

        :class:`InvalidArgument` names an undeclared attribute (listing the
        declared ones) or a value not of its type.
        """
        if values is None:
            return {}
        if not isinstance(values, dict):
            raise InvalidArgument(
                f"{where}: attributes must be a dict of name to value, got {values!r:.80}", "attributes"
            )
        checked = {}
        for name, value in values.items():
            kind = declared_type(self.attributes, name, where)
            checked[name] = (kind, check_value(kind, value, name, where))
        return checked

    def attribute_values_from_json(self, values: Any) -> dict[str, Any] | None:
        """Attribute values from JSON (the API's): a ``Decimal`` or a ``datetime`` given as a string is parsed.

        The result goes to ``run(attributes=...)``, which checks it (an int
        stays a number, a str a string); InvalidArgument for what cannot be read.
        """
        if values is None:
            return None
        where = f"run of workflow {self.name!r}"
        if not isinstance(values, dict):
            raise InvalidArgument(f"{where}: attributes must be an object of name to value", "attributes")
        typed = {}
        for name, value in values.items():
            kind = declared_type(self.attributes, name, where)
            typed[name] = parse_value(kind, value, name, where) if kind is not str and isinstance(value, str) else value
        return typed

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
            raise UnknownWorkflowError(f"no workflow named {name!r} is registered{self.suggest(name)}")
        return max(candidates, key=lambda spec: _version_sort_key(spec.version))

    def find(self, name: str, version: str | None) -> WorkflowSpec:
        """The workflow to start: ``version`` of ``name``, or its highest; UnknownWorkflowError saying what exists."""
        if version is None:
            return self.latest(name)
        spec = self.get(name, version)
        if spec is None:
            versions = sorted((v for n, v in list(self._registry) if n == name), key=_version_sort_key)
            known = f"; its versions: {', '.join(map(repr, versions))}" if versions else self.suggest(name)
            raise UnknownWorkflowError(f"no workflow {name!r} with version {version!r} is registered{known}")
        return spec

    def suggest(self, name: str) -> str:
        """``; did you mean 'x'?`` for a name close to a registered one, else ``; registered: ...``; or empty."""
        names = sorted({n for n, _ in list(self._registry)})
        close = difflib.get_close_matches(name, names, n=3)
        if close:
            return f"; did you mean {' or '.join(map(repr, close))}?"
        if names:
            shown = ", ".join(map(repr, names[:10])) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            return f"; registered: {shown}"
        return "; none is registered (is the app that defines it in INSTALLED_APPS?)"

    def subscribed_to(self, event_type: str) -> list[WorkflowSpec]:
        """The workflows an event of ``event_type`` may start: the highest version of each name, if it subscribes.

        Only the highest version's ``on_event`` counts, and it is the version
        that starts (as ``start_run`` without a version).
        """
        names = sorted({n for (n, _), spec in list(self._registry.items()) if spec.on_event})
        found = []
        for name in names:
            try:
                spec = self.latest(name)
            except UnknownWorkflowError:  # unregistered meanwhile
                continue
            if any(sub.event == event_type for sub in spec.on_event):
                found.append(spec)
        return found

    def attribute_types(self, workflow_name: str | None = None) -> dict[str, type]:
        """The attributes the registered workflows (or those of ``workflow_name``) declare, by name.

        A name two workflows declare with different types has no one type:
        :class:`InvalidArgument` asks for the workflow (system check W009).
        """
        declared: dict[str, type] = {}
        for spec in list(self._registry.values()):
            if workflow_name is not None and spec.name != workflow_name:
                continue
            for name, kind in spec.attributes.items():
                if declared.setdefault(name, kind) is not kind:
                    raise InvalidArgument(
                        f"attribute {name!r} is declared as {declared[name].__name__} by one workflow and "
                        f"{kind.__name__} by another: filter on one workflow (workflow=...)",
                        "attributes",
                    )
        return declared

    def attribute_names(self) -> list[tuple[str, str]]:
        """Every declared attribute as ``(name, type name)``, sorted: what the admin's filter suggests."""
        found = {
            (name, kind.__name__) for spec in list(self._registry.values()) for name, kind in spec.attributes.items()
        }
        return sorted(found)

    def attribute_conditions(
        self, filters: Any, workflow_name: str | None = None, *, text: bool = False
    ) -> tuple[AttributeCondition, ...]:
        """``{"amount__gte": Decimal("10"), "region": "eu"}`` as checked conditions, each typed as declared.

        With ``text`` the values are text (a query string's, the command
        line's) and are parsed as their type. :class:`InvalidArgument` names
        an unknown attribute, an unknown lookup or a value not of its type.
        """
        if filters is None:
            return ()
        if not isinstance(filters, dict):
            raise InvalidArgument(f"attributes must be a dict of filters, got {filters!r:.80}", "attributes")
        declared = self.attribute_types(workflow_name)
        where = "attribute filter" if workflow_name is None else f"attribute filter on workflow {workflow_name!r}"
        conditions = []
        for key, wanted in filters.items():
            name, lookup = split_lookup(key, where)
            kind = declared_type(declared, name, where)

            def typed(value: Any, name: str = name, kind: type = kind) -> Any:
                if text:
                    if not isinstance(value, str):
                        raise InvalidArgument(f"{where}: {name!r} is given as text, got {value!r:.80}", "attributes")
                    return parse_value(kind, value, name, where)
                return check_value(kind, value, name, where)

            if lookup == "in":
                values = wanted.split(",") if text and isinstance(wanted, str) else wanted
                if isinstance(values, str | bytes) or not isinstance(values, list | tuple | set | frozenset):
                    raise InvalidArgument(f"{where}: {key!r} takes a list of values, got {wanted!r:.80}", "attributes")
                conditions.append(AttributeCondition(name, kind, lookup, tuple(typed(value) for value in values)))
            else:
                conditions.append(AttributeCondition(name, kind, lookup, typed(wanted)))
        return tuple(conditions)

    def all(self) -> list[WorkflowSpec]:
        return sorted(self._registry.values(), key=lambda s: (s.name, _version_sort_key(s.version)))


registry = WorkflowRegistry()
