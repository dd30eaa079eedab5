"""Test helpers: execute workflow runs in the test's own process and thread, and skip time.

Three ways to use them, from the least to the most automatic::

    from django_openworkflow.testing import advance, drain, run_workflows

    handle = onboard_user.run({"email": "ada@example.com"})
    drain()                       # execute every due run, here, until nothing is due (sleeps skipped)
    assert handle.result(timeout=0) == {...}

    with run_workflows():         # drains when the block ends
        client.post("/signup/", {...})

    advance("1d"); drain()        # time travel: sleeps, wait timeouts, deadlines, scheduled starts

    decide(handle, approved=True, by="ada"); drain()            # a person's decision, no admin needed
    claim_task(handle, by="ada")                                 # who works on it (release_task, reassign_task)
    advance("2d"); fire_task_timers()                            # the tasks' reminders and escalations due
    submit_task(handle, {"amount": "12.50"}, by="ada"); drain()  # a task's form, validated by the form

and ``OPENWORKFLOW["DISPATCH"] = "django_openworkflow.testing.EagerDispatcher"``,
which executes each started run to completion as soon as its start commits
(like Celery's eager mode). The pytest plugin (registered through the
``pytest11`` entry point) adds the ``workflow_runner`` fixture.

**Where it works.** Slices are executed on the calling thread with the
calling thread's database connection, so the runs a test started are
visible even though nothing is committed: the helpers work inside Django's
``TestCase`` (and pytest-django's default ``db`` fixture), whose
transaction is never committed, as well as in ``TransactionTestCase``
(``@pytest.mark.django_db(transaction=True)``), where every write commits.
The one exception is the eager dispatcher under ``TestCase``: it runs on
commit, and ``TestCase`` never commits, so wrap the code that starts runs in
``self.captureOnCommitCallbacks(execute=True)`` (pytest-django:
``django_capture_on_commit_callbacks(execute=True)``).

**Queues.** A drain serves the ``default`` queue, as ``runworkflows``
without ``--queue``, and warns about the runs it leaves on other queues;
``queues=[...]`` names those it serves, ``queues="*"`` every queue.

**Time.** The engine decides with the database clock, which the helpers do
not fake. They move the runs instead: skipping a sleep or advancing time
moves the run's due time (``available_at``), the open sleep's resume time,
a wait's timeout and the run's deadline back by the same amount, through
the database, so the engine sees exactly what it would see once that time
had passed. Cron schedules (``@workflow(schedule=...)``) are not ticked.

Nothing here is imported by the rest of the package; importing this module
does not need configured settings (the pytest plugin imports it early).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeAlias

from ..definitions.flow import DEFAULT_QUEUE
from ..durations import Duration, parse_duration
from .human_tasks import claim_task, decide, reassign_task, release_task, submit_task
from .overrides import override_openworkflow
from .replay import assert_replays, check_replay

if TYPE_CHECKING:
    from ..engine.execute import SliceResult
    from ..store.backends.base import Backend
    from ..store.records import ClaimedRun
    from ..worker.runner import SliceRunner

__all__ = [
    "ALL_QUEUES",
    "DrainError",
    "EagerDispatcher",
    "UnservedQueueWarning",
    "WorkflowRunner",
    "advance",
    "assert_replays",
    "check_replay",
    "claim_task",
    "decide",
    "drain",
    "execute_eagerly",
    "fire_task_timers",
    "override_openworkflow",
    "reassign_task",
    "release_task",
    "run_workflows",
    "submit_task",
]

logger = logging.getLogger("django_openworkflow.testing")

ALL_QUEUES = "*"
"""``queues=ALL_QUEUES`` (``"*"``): a drain serves every queue."""

Queues: TypeAlias = Sequence[str] | str | None
"""A ``queues`` argument: queue names, ``"*"`` for every queue, or ``None`` for ``["default"]``."""


class UnservedQueueWarning(UserWarning):
    """A drain left unfinished runs on queues it does not serve (a worker without ``--queue`` for them would too)."""


MAX_SLICES = 10_000
"""A drain that executes this many slices gives up: some run keeps coming due (a loop that never ends)."""


class DrainError(AssertionError):
    """A drain could not finish: it ran out of time or slices, or ``until`` never became true.

    An ``AssertionError``, so test runners report it as a failure.
    """


_local = threading.local()  # the drains in progress on this thread (the eager dispatcher nests into them)


class WorkflowRunner:
    """Executes due workflow runs in this thread until none is due; moves runs through time.

    ``skip_sleeps`` (default True) lets a drain finish runs that sleep, back
    off before a retry, or are scheduled for later, at once. Waits for a
    signal, an event or a child run are not skipped: their timeouts pass
    only with :meth:`advance`, so a test can send the signal first.
    ``queues`` are the queues a drain serves, as ``runworkflows --queue``
    names them: by default ``["default"]``, as a worker started without
    ``--queue``; ``"*"`` serves every queue. ``timeout`` (seconds, wall
    clock) bounds one drain.
    """

    def __init__(self, *, skip_sleeps: bool = True, timeout: float = 30.0, queues: Queues = None) -> None:
        self.skip_sleeps = skip_sleeps
        self.timeout = timeout
        self.queues = _served(queues)  # None: every queue
        self._chosen_queues = queues is not None  # else the worker's default: warn about the others
        self.worker_id = f"testing:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.slices: list[SliceResult] = []  # every slice this runner executed, in order
        self._runner: SliceRunner | None = None

    def __repr__(self) -> str:
        return f"<WorkflowRunner {self.worker_id} slices={len(self.slices)}>"

    @property
    def store(self) -> Backend:
        from ..store import get_backend

        return get_backend()

    # -- executing --

    def drain(
        self,
        *,
        until: Callable[[], bool] | None = None,
        skip_sleeps: bool | None = None,
        timeout: float | None = None,
        run_ids: Iterable[Any] | None = None,
        queues: Queues = None,
    ) -> list[SliceResult]:
        """Execute every due run, one slice at a time on this thread, until nothing is due; returns the slices.

        With ``skip_sleeps`` (the runner's setting by default), a run that
        sleeps, backs off or is scheduled for later is made due and executed
        too, so the drain ends only when every run has finished or waits for
        a signal, an event, a child it cannot reach, or a place under a
        limit. ``until`` stops the drain as soon as it returns true (checked
        before each slice); when nothing is left to execute and it is still
        false, :class:`DrainError` is raised. ``run_ids`` limits the drain to
        those runs and their child runs. ``queues`` (the runner's by
        default) are the queues served; when no one chose them and runs on
        other queues are left unfinished, an :class:`UnservedQueueWarning`
        names those queues. Raises :class:`DrainError` after ``timeout``
        seconds or :data:`MAX_SLICES` slices.
        """
        served = self.queues if queues is None else _served(queues)
        skip = self.skip_sleeps if skip_sleeps is None else skip_sleeps
        limit = self.timeout if timeout is None else timeout
        scope = None if run_ids is None else {_as_uuid(run_id) for run_id in run_ids}
        give_up = time.monotonic() + limit
        done: list[SliceResult] = []
        skipped: set[uuid.UUID] = set()
        from ..engine.watchdog import watchdog

        stack: list[set[uuid.UUID] | None] = _local.__dict__.setdefault("drains", [])
        stack.append(scope)
        try:
            with watchdog.off_on_this_thread():
                while True:
                    if until is not None and until():
                        break
                    if time.monotonic() > give_up:
                        raise DrainError(f"workflow runs were still due after {limit:g}s: {self._describe(scope)}")
                    if len(done) >= MAX_SLICES:
                        raise DrainError(
                            f"{MAX_SLICES} slices executed and runs are still due (a loop that never ends?): "
                            f"{self._describe(scope)}"
                        )
                    claimed = self._claim_one(scope, served)
                    if claimed is not None:
                        done.append(self._execute(claimed))
                        continue
                    if skip and self._skip_timers(scope, skipped, served):
                        continue
                    # A run whose time came between that claim and the skip was neither
                    # claimed nor made due: one more claim before the drain may end.
                    claimed = self._claim_one(scope, served)
                    if claimed is not None:
                        done.append(self._execute(claimed))
                        continue
                    if until is not None:
                        raise DrainError(
                            f"nothing left to execute and the until condition is still false: {self._describe(scope)}"
                        )
                    break
        finally:
            stack.pop()
        if served is not None and queues is None and not self._chosen_queues:
            self._warn_unserved(scope, served)
        return done

    def _warn_unserved(self, scope: set[uuid.UUID] | None, served: tuple[str, ...]) -> None:
        """Warn about unfinished runs on queues this drain did not serve: a test would pass, a worker never run them."""
        from ..models import WorkflowRun

        runs = WorkflowRun.objects.claimable().exclude(queue__in=served)
        if scope is not None:
            runs = runs.filter(id__in=self._tree(scope))
        left = sorted(set(runs.values_list("queue", flat=True)))
        if left:
            warnings.warn(
                f"drain() served the queues {list(served)} and left unfinished runs on {left}, as a "
                f"runworkflows worker without --queue for them would: pass queues=[...] naming them, "
                f"or queues='*' for every queue",
                UnservedQueueWarning,
                stacklevel=3,
            )

    def _execute(self, claimed: ClaimedRun) -> SliceResult:
        from ..worker.runner import SliceRunner

        if self._runner is None:
            self._runner = SliceRunner(self.store, logger)
        result = self._runner.run(claimed, _always)
        self.slices.append(result)
        return result

    def _claim_one(self, scope: set[uuid.UUID] | None, served: tuple[str, ...] | None) -> ClaimedRun | None:
        """Claim the next due run (of ``scope`` and its children, if given), in the workers' order."""
        from ..conf import owf_settings
        from ..models import WorkflowRun
        from ..store.fairness import claim_order

        store = self.store
        lease = owf_settings.lease
        if scope is None:
            queues = served
            if queues is None:
                queues = tuple(
                    WorkflowRun.objects.claimable().order_by().values_list("queue", flat=True).distinct()
                ) or (DEFAULT_QUEUE,)
            claimed = store.claim(self.worker_id, 1, lease, queues)
            return claimed[0] if claimed else None
        tree = self._tree(scope)
        due = WorkflowRun.objects.due(store.now()).filter(id__in=tree)
        if served is not None:
            due = due.filter(queue__in=served)
        for run_id in due.order_by(*claim_order()).values_list("id", flat=True):
            one = store.claim_run(run_id, self.worker_id, lease)
            if one is not None:
                return one
        return None

    def _tree(self, scope: set[uuid.UUID]) -> set[uuid.UUID]:
        """``scope`` and every run started from it as a child, at any depth."""
        from ..models import WorkflowRun

        tree = set(scope)
        frontier = set(scope)
        while frontier:
            children = set(
                WorkflowRun.objects.filter(parent_step_attempt__workflow_run_id__in=frontier).values_list(
                    "id", flat=True
                )
            )
            frontier = children - tree
            tree |= frontier
        return tree

    def _describe(self, scope: set[uuid.UUID] | None) -> str:
        from ..models import WorkflowRun

        runs = WorkflowRun.objects.claimable()
        if scope is not None:
            runs = runs.filter(id__in=self._tree(scope))
        rows = list(runs.order_by("available_at").values_list("id", "workflow_name", "status", "available_at")[:10])
        return ", ".join(f"{name} {run_id} ({status}, due {at.isoformat()})" for run_id, name, status, at in rows)

    # -- time travel --

    def _skip_timers(
        self, scope: set[uuid.UUID] | None, skipped: set[uuid.UUID], served: tuple[str, ...] | None
    ) -> int:
        """Make runs that sleep, back off or are scheduled due now, as if their time had passed; how many."""
        from django.db import transaction

        from ..models import StepAttempt, WorkflowRun
        from ..states import RunStatus, StepKind, StepStatus

        store = self.store
        with store.write_lock(), transaction.atomic(using=store.alias):
            now = store.now()
            waiting = StepAttempt.objects.filter(
                status=StepStatus.RUNNING, kind__in=[StepKind.SIGNAL, StepKind.EVENT, StepKind.WORKFLOW]
            ).values("workflow_run_id")
            runs = (
                WorkflowRun.objects.claimable()
                .filter(worker_id__isnull=True, blocked_at__isnull=True, available_at__gt=now)
                .exclude(id__in=waiting)
            )
            # A run made due once that is still pending was put off by the claim itself (a
            # rate limit waits for other runs' starts to leave its window): moving it again
            # would loop. advance() moves those starts too.
            runs = runs.exclude(id__in=skipped, status=RunStatus.PENDING)
            if scope is not None:
                runs = runs.filter(id__in=self._tree(scope))
            if served is not None:
                runs = runs.filter(queue__in=served)
            rows = list(runs.select_for_update().values_list("id", "available_at"))
            skipped.update(run_id for run_id, _ in rows)
            for run_id, available_at in rows:
                _shift_runs([run_id], available_at - now, waits=False)
                WorkflowRun.objects.filter(id=run_id).update(available_at=now)
        return len(rows)

    def advance(self, duration: Duration) -> int:
        """Move every unfinished run ``duration`` into the future: as if that much time had passed.

        Due times, the resume times of sleeps, the timeouts of signal, event
        and child waits (and of approvals and tasks), deadlines, and the recent
        starts that rate limits count all move back by ``duration``. Nothing is executed: call
        :meth:`drain` next. Returns how many unfinished runs were moved.
        """
        from django.db import transaction
        from django.db.models import F

        from ..models import WorkflowRun

        delta = parse_duration(duration)
        store = self.store
        with store.write_lock(), transaction.atomic(using=store.alias):
            unfinished = WorkflowRun.objects.claimable()
            ids = list(unfinished.select_for_update().values_list("id", flat=True))
            # Runs held by a worker keep their lease; runs waiting for a place keep their place in line.
            WorkflowRun.objects.filter(id__in=ids, worker_id__isnull=True, blocked_at__isnull=True).update(
                available_at=F("available_at") - delta
            )
            _shift_runs(ids, delta, waits=True)
            # Rate limits count the starts within their window: those starts are older now.
            WorkflowRun.objects.filter(rate_key__isnull=False, started_at__isnull=False).update(
                started_at=F("started_at") - delta
            )
            # A debounced start folds into its pending run until max_delay after that run was created.
            WorkflowRun.objects.filter(id__in=ids, debounce_key__isnull=False).update(
                created_at=F("created_at") - delta
            )
        return len(ids)


def _shift_runs(run_ids: list[Any], delta: timedelta, *, waits: bool) -> None:
    """Inside a transaction: move the runs' open sleeps and deadlines back by ``delta`` (not their due times).

    With ``waits``, the timeouts of open signal, event and child waits too, and
    the timeouts, due times, reminders and escalations of their open
    approvals and tasks (a decision after the timeout is refused).
    """
    from django.db.models import F
    from django.utils.dateparse import parse_datetime

    from ..models import Approval, ApprovalStatus, StepAttempt, WorkflowRun
    from ..states import StepKind, StepStatus

    if not run_ids or not delta:
        return
    WorkflowRun.objects.filter(id__in=run_ids, deadline_at__isnull=False).update(deadline_at=F("deadline_at") - delta)
    if waits:
        Approval.objects.filter(workflow_run_id__in=run_ids, status=ApprovalStatus.OPEN).update(
            timeout_at=F("timeout_at") - delta,
            due_at=F("due_at") - delta,
            next_remind_at=F("next_remind_at") - delta,
            escalate_at=F("escalate_at") - delta,
        )
    kinds = [StepKind.SLEEP, StepKind.SIGNAL, StepKind.EVENT, StepKind.WORKFLOW] if waits else [StepKind.SLEEP]
    open_steps = StepAttempt.objects.filter(workflow_run_id__in=run_ids, status=StepStatus.RUNNING, kind__in=kinds)
    for attempt_id, kind, context in open_steps.values_list("id", "kind", "context"):
        field = "resume_at" if kind == StepKind.SLEEP else "timeout_at"
        when = parse_datetime(str((context or {}).get(field, "")))
        if when is None:
            continue
        moved: datetime = when - delta
        StepAttempt.objects.filter(id=attempt_id).update(context={**context, field: moved.isoformat()})


def _always() -> bool:
    return True


def _served(queues: Queues) -> tuple[str, ...] | None:
    """The queues a drain serves (``None``: every queue), from a ``queues`` argument."""
    if queues is None:
        return (DEFAULT_QUEUE,)  # as runworkflows without --queue
    if queues == ALL_QUEUES:
        return None
    if isinstance(queues, str):
        raise TypeError(f"queues must be a list of queue names or {ALL_QUEUES!r}, got the string {queues!r}")
    return tuple(queues)


def _as_uuid(run_id: Any) -> uuid.UUID:
    run_id = getattr(run_id, "id", run_id)  # a RunHandle or a WorkflowRun
    return run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(str(run_id))


# -- module-level shortcuts --


def drain(
    *,
    skip_sleeps: bool = True,
    until: Callable[[], bool] | None = None,
    timeout: float = 30.0,
    queues: Queues = None,
    run_ids: Iterable[Any] | None = None,
) -> list[SliceResult]:
    """Execute the due runs of ``queues`` on this thread until nothing is due (see :meth:`WorkflowRunner.drain`).

    ``queues`` defaults to ``["default"]``, what ``runworkflows`` serves
    without ``--queue``; ``queues="*"`` serves every queue.
    """
    runner = WorkflowRunner(skip_sleeps=skip_sleeps, timeout=timeout, queues=queues)
    return runner.drain(until=until, run_ids=run_ids)


def fire_task_timers(*, store: Any = None) -> list[Any]:
    """Fire the human tasks' reminders and escalations due now, as a worker's sweep does; the timers that fired.

    After :func:`advance` (or, on an in-memory backend, its clock's
    ``advance()``, with ``store=``). ``APPROVAL_NOTIFY`` is called for each,
    in this process (``mail.outbox`` holds the mails).
    """
    from ..worker.task_timers import fire_task_timers as fire

    return fire(store=store)


def advance(duration: Duration) -> int:
    """Move every unfinished run ``duration`` into the future (see :meth:`WorkflowRunner.advance`)."""
    return WorkflowRunner().advance(duration)


@contextmanager
def run_workflows(
    *,
    skip_sleeps: bool = True,
    until: Callable[[], bool] | None = None,
    timeout: float = 30.0,
    queues: Queues = None,
) -> Iterator[WorkflowRunner]:
    """Drain when the block ends without an exception: the runs started in it are executed by then.

    ::

        with run_workflows():
            response = client.post("/signup/", {"email": "ada@example.com"})
        assert get_run(run_id).status() == "completed"

    The runner is yielded, for ``runner.advance(...)`` and ``runner.drain()`` inside the block.
    """
    runner = WorkflowRunner(skip_sleeps=skip_sleeps, timeout=timeout, queues=queues)
    yield runner
    runner.drain(until=until)


from .eager import EagerDispatcher, execute_eagerly  # noqa: E402  (it builds on WorkflowRunner, above)
