"""Holding on to runs: :class:`RunHandle`, :func:`get_run` and :func:`send_signal`."""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .. import hooks
from ..definitions.payload import check_text, to_json_value
from ..encryption import MissingFile, is_undecryptable
from ..errors import (
    InvalidArgument,
    OperationRefused,
    PayloadFileMissing,
    PayloadUndecryptable,
    ResultTimeout,
    RunNotFound,
    WorkflowCanceled,
    WorkflowFailed,
)
from ..models import WorkflowRun
from ..states import DisplayStatus, RunStatus
from ..store import get_backend, run_states
from ..store.attributes import run_attributes
from ..store.notify import run_waiters
from .subjects import Subject

if TYPE_CHECKING:
    from .listing import StepRecord


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
                    if run.output.__class__ is MissingFile:
                        raise PayloadFileMissing(
                            f"the output of workflow run {run.id} cannot be read: {run.output}", run.output.reference
                        )
                    if is_undecryptable(run.output):
                        key_id = run.output.key_id
                        raise PayloadUndecryptable(
                            f"the output of workflow run {run.id} cannot be decrypted with the keys of "
                            f"OPENWORKFLOW['PAYLOAD_ENCRYPTION'] (it was encrypted with the key of id {key_id})",
                            key_id,
                        )
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
                    # already woke it for this run: poll from here on, its wake-up request withdrawn
                    # now (the finally below no longer sees it).
                    run_waiters.unregister(str(handle.id), finished)
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


def check_key(idempotency_key: str | None) -> None:
    if idempotency_key is not None:
        check_name("idempotency_key", idempotency_key)


def check_name(what: str, name: str) -> None:
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
    check_name("signal name", name)
    check_key(idempotency_key)
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
