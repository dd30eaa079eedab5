"""Starting runs and holding on to them: ``spec.run()``, :class:`RunHandle`, :func:`get_run`."""

from __future__ import annotations

import functools
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from .. import hooks
from ..definitions.payload import check_text, to_json_value
from ..definitions.registry import install_client, registry
from ..durations import Duration, parse_duration
from ..errors import (
    InvalidArgument,
    OperationRefused,
    ResultTimeout,
    RunNotFound,
    WorkflowCanceled,
    WorkflowFailed,
)
from ..models import WorkflowRun
from ..states import DisplayStatus, RunStatus
from ..store import get_backend, run_states
from ..store.attributes import insert_attributes, run_attributes, start_transaction
from ..store.notify import run_waiters
from .dispatcher import get_dispatcher
from .subjects import Subject, subject_of

if TYPE_CHECKING:
    from .listing import StepRecord


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
    _check_key(idempotency_key)
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
        _check_key(key)
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


class RunHandle:
    """A reference to one workflow run. Cheap to create; every method reads the database.

    ``created`` is True on the handle ``run()`` returns when that call
    created the run, False when an idempotency key returned an existing one
    (and on handles made any other way).
    """

    def __init__(self, run_id: uuid.UUID | str, *, created: bool = False) -> None:
        self.id = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
        self.created = created

    def __repr__(self) -> str:
        return f"<RunHandle {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def fetch(self) -> WorkflowRun:
        """The run's row as it is now."""
        run = get_backend().get_run(self.id)
        if run is None:
            raise RunNotFound(f"no workflow run with id {self.id}")
        return run

    def status(self) -> str:
        """The stored status: ``pending``, ``running``, ``completed``, ``failed``, ``canceled`` or ``continued``.

        A run that sleeps, waits or backs off before a retry is ``running``:
        it has not finished. :meth:`display_status` says which.
        """
        return self.fetch().status

    def display_status(self) -> DisplayStatus:
        """What the admin, the CLI and the API's ``display_status`` call the run now (see :class:`DisplayStatus`).

        :meth:`status` split further: ``running`` only while a worker holds
        the run, else ``retrying``, ``waiting`` or ``parked``. Meant for
        people and dashboards; branch on :meth:`status` in code.
        """
        return run_states.state_of(self.fetch()).status

    def result(self, timeout: float | timedelta | None = None) -> Any:
        """Wait for the run to finish and return its output.

        Raises :class:`WorkflowFailed` or :class:`WorkflowCanceled` when it
        ended that way, and :class:`ResultTimeout` (a ``TimeoutError``) after
        ``timeout`` seconds. A run that continued as new
        (``ctx.continue_as_new``) is followed to the end of its chain.
        """
        if isinstance(timeout, timedelta):
            timeout = timeout.total_seconds()
        if timeout is not None and not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"timeout must be a finite number of seconds (at least 0) or None, got {timeout!r}")
        give_up = None if timeout is None else time.monotonic() + timeout
        # PostgreSQL notifies when a run finishes, SQLite's commits wake waiters to look
        # again; polling is only the safety net (and all there is on MySQL). The listener
        # is asked for only once a read shows the run unfinished and there is time left to
        # wait: a finished run, or timeout=0, is one read and opens no connection.
        handle = self
        finished: threading.Event | None = None
        may_listen = True
        pause = 0.005
        wait_slice = 0.01
        left: float | None = None
        try:
            while True:
                if finished is not None:
                    finished.clear()  # a wake-up from here on is seen by the wait below
                run = handle.fetch()
                if run.status == RunStatus.CONTINUED:
                    successor = handle.successor()
                    if successor is not None:
                        if finished is not None:
                            run_waiters.unregister(str(handle.id), finished)
                        handle, pause, finished, may_listen = successor, 0.005, None, True
                        continue
                if run.status == RunStatus.COMPLETED:
                    return run.output
                if run.status == RunStatus.FAILED:
                    raise WorkflowFailed(run.id, run.error)
                if run.status == RunStatus.CANCELED:
                    raise WorkflowCanceled(run.id)
                if give_up is not None:
                    left = give_up - time.monotonic()
                    if left <= 0:
                        raise ResultTimeout(
                            f"workflow run {self.id} did not finish within {timeout}s (status {run.status})"
                        )
                if may_listen:
                    may_listen = False  # once per run: where the database cannot notify, poll
                    finished = run_waiters.register(str(handle.id), 2.0 if left is None else min(left, 2.0))
                    if finished is not None:
                        continue  # read again, now listening: a finish just before the LISTEN is not missed
                if finished is not None and not run_waiters.is_registered(str(handle.id), finished):
                    # Its listener was stopped (a test database dropped, the settings changed) or
                    # already woke it for this run: poll from here on.
                    finished = None
                if finished is not None:
                    # Short slices first: a finish that was committing while this waiter
                    # asked to be told (PostgreSQL) notified nobody; it shows on a re-read.
                    finished.wait(wait_slice if left is None else min(left, wait_slice))
                    wait_slice = min(wait_slice * 2, 1.0)
                else:
                    time.sleep(pause if left is None else min(pause, left))
                    pause = min(pause * 2, 0.25)
        finally:
            if finished is not None:
                run_waiters.unregister(str(handle.id), finished)

    def attributes(self) -> dict[str, Any]:
        """The run's attributes by name, each as its declared type (a ``datetime`` in UTC); one query."""
        return run_attributes(self.id)

    def subject(self) -> Subject | None:
        """What the run was started for (``subject=obj``): the model's label and the primary key, or None.

        The object itself is not read (it may have been deleted since).
        """
        run = WorkflowRun.objects.filter(id=self.id).values_list("subject_type", "subject_id").first()
        if run is None:
            raise RunNotFound(f"no workflow run with id {self.id}")
        subject_type, subject_id = run
        return None if subject_type is None else Subject(subject_type, subject_id or "")

    def successor(self) -> RunHandle | None:
        """The run this one handed over to with ``ctx.continue_as_new``, if it did."""
        successor_id = get_backend().successor_id(self.id)
        return None if successor_id is None else RunHandle(successor_id)

    def predecessor(self) -> RunHandle | None:
        """The run that handed over to this one with ``ctx.continue_as_new``, if any."""
        predecessor_id = self.fetch().continued_from_id
        return None if predecessor_id is None else RunHandle(predecessor_id)

    def parent(self) -> RunHandle | None:
        """The run that started this one with ``ctx.step.run_workflow``, if any."""
        parent_id = get_backend().parent_run_id(self.id)
        return None if parent_id is None else RunHandle(parent_id)

    def children(self) -> list[RunHandle]:
        """The runs this one started with ``ctx.step.run_workflow``, oldest first."""
        return [RunHandle(child_id) for child_id in get_backend().child_run_ids(self.id)]

    def steps(self) -> list[StepRecord]:
        """The run's journal: every step attempt in the order it was written (sleeps, waits and children too)."""
        from .listing import run_steps

        return run_steps(self.id)

    def get_event(self, key: str, timeout: float | timedelta | None = None) -> Any:
        """The latest value the run published under ``key`` (``ctx.publish``), waiting until there is one.

        Raises :class:`ProgressTimeout` (a ``TimeoutError``) after ``timeout``
        seconds, and :class:`EventNotPublished` when the run finished without
        publishing ``key``.
        """
        from .progress import get_event

        return get_event(self.id, key, timeout)

    def stream(
        self, name: str, offset: int = 0, *, follow: bool = True, timeout: float | timedelta | None = None
    ) -> Iterator[Any]:
        """Iterate over the chunks of the run's stream ``name`` (``ctx.stream(name).write``) from ``offset``, in order.

        Each chunk once: a reader that stops after ``n`` chunks resumes with
        ``offset=offset + n``. With ``follow`` (the default) the iterator
        waits for more and ends when the run has finished and every chunk it
        wrote was given; ``timeout`` bounds each wait for a next chunk
        (:class:`ProgressTimeout`). With ``follow=False`` it gives what is
        there now and ends.
        """
        from .progress import read_stream

        return read_stream(self.id, name, offset, follow=follow, timeout=timeout)

    def signal(self, name: str, data: Any = None, idempotency_key: str | None = None) -> bool:
        """Send a signal to this run (see :func:`send_signal`)."""
        return send_signal(self.id, name, data, idempotency_key)

    def cancel(self) -> bool:
        """Cancel the run. True if it was canceled now; False if it had already finished.

        A worker executing it stops at its next step boundary and writes nothing more.
        A run of a workflow declared with ``compensate_on_cancel=True`` that
        has started runs its compensations first: it stays ``running`` (with
        ``cancel_requested_at`` set) until a worker has run them.
        """
        from . import operations

        try:
            operations.cancel(self.id)
        except OperationRefused:
            return False
        return True


def _check_key(idempotency_key: str | None) -> None:
    if idempotency_key is not None:
        _check_name("idempotency_key", idempotency_key)


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not 0 < len(name) <= 255:
        raise InvalidArgument(f"{what} must be a non-empty string of at most 255 characters, got {name!r:.80}", what)
    check_text(name, what)


def send_signal(run_id: uuid.UUID | str, name: str, data: Any = None, idempotency_key: str | None = None) -> bool:
    """Send a signal to a run; True if a waiting step took it now, False if it is buffered.

    A signal sent before the run reaches ``ctx.step.wait_for_signal(name)``
    is kept and consumed by the first matching wait (FIFO per name). With
    ``idempotency_key``, sending twice delivers once. Inside
    ``transaction.atomic()`` it takes effect only if the transaction commits.
    Raises :class:`RunNotFound` or :class:`SignalError` (finished run).
    """
    _check_name("signal name", name)
    _check_key(idempotency_key)
    payload = to_json_value(data, f"data of signal {name!r}", "data")
    try:
        run_uuid = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))
    except ValueError:
        raise RunNotFound(f"{run_id!r} is not a workflow run id") from None
    started = time.monotonic()
    delivered = get_backend().send_signal(run_uuid, name, payload, idempotency_key)
    if hooks.signal_sent.receivers:  # metrics, tracing: they name the workflow, read only for them
        workflow_name = WorkflowRun.objects.filter(id=run_uuid).values_list("workflow_name", flat=True).first()
        hooks.send(
            hooks.signal_sent,
            workflow_name or "",
            run_id=run_uuid,
            signal_name=name,
            delivered=delivered,
            seconds=time.monotonic() - started,
        )
    return delivered


def get_run(run_id: uuid.UUID | str) -> RunHandle:
    """A handle for an existing run; :class:`RunNotFound` if there is none."""
    try:
        handle = RunHandle(run_id)
    except ValueError:
        raise RunNotFound(f"{run_id!r} is not a workflow run id") from None
    handle.fetch()
    return handle


# spec.run() starts runs through this module: the registry below cannot import it.
install_client(sys.modules[__name__])
