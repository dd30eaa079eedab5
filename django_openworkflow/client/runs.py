"""Starting runs: ``spec.run()``, ``spec.run_many()`` and the functions under them (the handle: handle.py)."""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..definitions.payload import to_json_value
from ..definitions.registry import install_client, registry
from ..durations import Duration, parse_duration
from ..errors import (
    InvalidArgument,
)
from ..store import get_backend
from ..store.attributes import insert_attributes, start_transaction
from .dispatcher import get_dispatcher
from .handle import RunHandle, check_key
from .subjects import subject_of

if TYPE_CHECKING:
    pass


def _as_datetime(value: datetime | Duration | None, what: str, db_clock: Callable[[], datetime]) -> datetime | None:
    """A datetime as given, or a duration from now (database clock)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            raise InvalidArgument(f"{what} must be timezone-aware, got naive {value!r}", what)
        return value
    try:
        return db_clock() + parse_duration(value)
    except ValueError as exc:
        raise InvalidArgument(f"{what}: {exc}", what) from None


def start_run(
    workflow_name: str,
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
    """Start a run of ``workflow_name``.

    ``version`` defaults to the highest registered version (natural order,
    so ``v10`` > ``v9``). ``available_at`` delays the start; ``deadline_at``
    fails the run if it has not finished by then. With ``idempotency_key``,
    starting the same workflow with the same key again returns the first run.
    ``queue``, ``priority``, ``concurrency_key`` and ``debounce_key``
    override the workflow's flow-control declarations for this run. A
    debounced start returns the run it folded into (``created`` False).
    ``retention`` overrides how long the run is kept once finished.
    ``subject`` links the run to a saved model instance (:func:`runs_for`).
    ``attributes`` are values of the workflow's declared attributes, written
    with the run (a start that returns an existing run writes none).
    """
    return start_run_with_id(
        None,
        workflow_name,
        input,
        version=version,
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


def start_run_with_id(
    run_id: uuid.UUID | None,
    workflow_name: str,
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
    """:func:`start_run`, the new run's id chosen by the caller (a new one when ``None``).

    For a start whose id must be known before its row is written (the Tasks
    backend's enqueue that waits for the caller's commit).
    """
    spec = registry.find(workflow_name, version)
    version = spec.version
    check_key(idempotency_key)
    stored_input = to_json_value(input, f"input of workflow {workflow_name!r}", "input")
    flow = spec.flow_fields(
        stored_input, queue=queue, priority=priority, concurrency_key=concurrency_key, retention=retention
    )
    if run_id is not None:
        flow["id"] = run_id
    if subject is not None:
        flow.update(subject_of(subject).columns())
    typed = spec.attribute_values(attributes, f"run of workflow {workflow_name!r}")
    debounce = spec.debounce_key_for(stored_input, debounce_key)
    if debounce is not None and (idempotency_key is not None or available_at is not None):
        raise InvalidArgument(
            f"workflow {workflow_name!r} debounces its starts: they take no idempotency_key or available_at",
            "idempotency_key" if idempotency_key is not None else "available_at",
        )
    store = get_backend()
    available, deadline = _start_times(store.now, available_at, deadline_at)
    with start_transaction(store.alias, bool(typed)):
        run, created = store.insert_run(
            workflow_name=workflow_name,
            version=version,
            input=stored_input,
            available_at=available,
            deadline_at=deadline,
            idempotency_key=idempotency_key,
            flow=flow,
            debounce=None
            if debounce is None or spec.debounce is None
            else (debounce, spec.debounce.delay, spec.debounce.max_delay),
        )
        if created and typed:
            insert_attributes([(run.id, typed)])
    if created:
        get_dispatcher().run_started(run.id, queue=run.queue)
    return RunHandle(run.id, created=created)


def start_runs(
    workflow_name: str,
    inputs: Iterable[Any],
    *,
    version: str | None = None,
    idempotency_keys: Sequence[str | None] | None = None,
    available_at: datetime | Duration | None = None,
    deadline_at: datetime | Duration | None = None,
    queue: str | None = None,
    priority: int | None = None,
    retention: Duration | None = None,
    subjects: Sequence[Any] | None = None,
    attributes: Sequence[dict[str, Any] | None] | None = None,
) -> list[RunHandle]:
    """Start one run of ``workflow_name`` per input, in a few statements; their handles, in order.

    The bulk form of :func:`start_run`, in the current transaction like it.
    ``idempotency_keys`` (one per input, ``None`` for none) are honoured
    per run: a key the workflow already has, or that an earlier input of
    this call has, returns that run's handle with ``created`` False. Every
    input is checked before anything is written: one that is not JSON
    raises :class:`PayloadError` naming its index, and no run starts. A
    debounced workflow's starts fold together, which is ``run()``'s job:
    it is refused here. ``subjects`` (one saved model instance per input,
    ``None`` for none) links each run to its object (:func:`runs_for`);
    ``attributes`` (one dict per input, ``None`` for none) are the
    attribute values of each run, checked before anything is written.
    """
    spec = registry.find(workflow_name, version)
    if spec.debounce is not None:
        raise InvalidArgument(
            f"workflow {workflow_name!r} debounces its starts, which fold into one run: start them with run()",
            "inputs",
        )
    values = list(inputs)
    keys = _one_per_input(idempotency_keys, len(values), "idempotency keys", "idempotency_keys")
    for key in keys:
        check_key(key)
    linked = [
        {} if obj is None else subject_of(obj, f"subject {index}").columns()
        for index, obj in enumerate(_one_per_input(subjects, len(values), "subjects", "subjects"))
    ]
    typed = [
        spec.attribute_values(given, f"attributes {index} of workflow {workflow_name!r}")
        for index, given in enumerate(_one_per_input(attributes, len(values), "attribute dicts", "attributes"))
    ]
    store = get_backend()
    available, deadline = _start_times(store.now, available_at, deadline_at)
    rows = []
    for index, (value, key, subject) in enumerate(zip(values, keys, linked, strict=True)):
        stored = to_json_value(value, f"input {index} of workflow {workflow_name!r}", "input")
        rows.append(
            {
                "workflow_name": spec.name,
                "version": spec.version,
                "input": stored,
                "available_at": available,
                "deadline_at": deadline,
                "idempotency_key": key,
                **spec.flow_fields(stored, queue=queue, priority=priority, retention=retention),
                **subject,
            }
        )
    with start_transaction(store.alias, any(typed)):
        inserted = store.insert_runs(rows) if rows else []
        insert_attributes(
            (run_id, values) for (run_id, created), values in zip(inserted, typed, strict=True) if created and values
        )
    dispatcher = get_dispatcher()
    for (run_id, created), row in zip(inserted, rows, strict=True):
        if created:
            dispatcher.run_started(run_id, queue=row["queue"])
    return [RunHandle(run_id, created=created) for run_id, created in inserted]


def _one_per_input(given: Sequence[Any] | None, count: int, what: str, parameter: str) -> list[Any]:
    """``given`` as one item per input (``None`` each when not given); InvalidArgument if it has more or fewer."""
    items = [None] * count if given is None else list(given)
    if len(items) != count:
        raise InvalidArgument(f"{len(items)} {what} for {count} inputs: give one per input (None for none)", parameter)
    return items


def _start_times(
    now: Callable[[], datetime], available_at: datetime | Duration | None, deadline_at: datetime | Duration | None
) -> tuple[datetime | None, datetime | None]:
    """``available_at`` and ``deadline_at`` as times; a duration counts from ``now()``, called once at most."""
    db_clock = functools.cache(now)
    available = _as_datetime(available_at, "available_at", db_clock)
    deadline = _as_datetime(deadline_at, "deadline_at", db_clock)
    if deadline is not None and deadline <= db_clock():
        raise InvalidArgument(f"deadline_at {deadline.isoformat()} is already in the past", "deadline_at")
    return available, deadline


# spec.run() starts runs through this module: the registry below cannot import it.
install_client(sys.modules[__name__])
