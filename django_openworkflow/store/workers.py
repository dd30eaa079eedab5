"""Workers' heartbeat rows and paused queues: what serves each queue, and which queues nobody serves.

A ``runworkflows`` worker writes its row when it starts (:func:`register`),
at each heartbeat of its supervisor thread (:func:`beat`, every lease/3)
and when it stops cleanly (:func:`mark_stopped`). A row is *live* while it
was seen within :data:`DEAD_AFTER_BEATS` of its heartbeats, *dead* after
that (the worker crashed, froze or lost the database), *stopped* once the
worker said so. Rows of stopped and dead workers are kept for
:data:`KEEP_GONE`, then deleted by any worker's heartbeat (:func:`prune_gone`,
at most every :data:`PRUNE_EVERY`).

A queue is *paused* when its :class:`~django_openworkflow.models.QueueState`
row says so. Workers read the paused queues at each heartbeat and leave
them out of their claims: a pause takes effect within one heartbeat, and
the claim itself reads nothing more.

A queue is *unserved* when runs are due in it, it is not paused, and no
live worker serves it: the admin, the metrics, ``workflows queues`` and the
worker's start-up check all read that from :func:`queue_overview`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count
from django.utils.translation import gettext

from ..definitions.flow import DEFAULT_QUEUE, check_queue
from ..models import QueueState, WorkerProcess, WorkflowRun
from . import get_backend
from .queries import queue_names

ALL_QUEUES = "*"
"""In a worker's queues: it serves every queue that is not paused (``runworkflows --queue '*'``)."""
DEAD_AFTER_BEATS = 3
"""A worker not seen for this many of its heartbeats (one lease) is dead: its runs' leases have expired too."""
KEEP_GONE = timedelta(days=1)
"""How long the rows of stopped and dead workers stay listed before a heartbeat deletes them."""
PRUNE_EVERY = timedelta(minutes=10)
"""A worker deletes old rows at its first heartbeat, then at most this often."""

LIVE, DEAD, STOPPED = "live", "dead", "stopped"


@dataclass(frozen=True)
class WorkerInfo:
    """One worker's row as the admin, the CLI and the API show it."""

    worker_id: str
    host: str
    pid: int
    version: str
    queues: list[str]
    slots_busy: int
    slots_total: int
    heartbeat_seconds: float
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    state: str

    def serves(self, queue: str) -> bool:
        return ALL_QUEUES in self.queues or queue in self.queues

    def as_dict(self) -> dict[str, Any]:
        """For ``--json`` and the API: times in ISO 8601."""
        row = dict(self.__dict__)
        for key in ("started_at", "last_seen_at", "stopped_at"):
            row[key] = row[key].isoformat() if row[key] is not None else None
        return row


@dataclass(frozen=True)
class QueueInfo:
    """One queue: its runs due and held now, whether it is paused, and the live workers that serve it."""

    name: str
    due: int
    running: int
    paused: bool
    served_by: list[str] = field(default_factory=list)

    @property
    def unserved(self) -> bool:
        """Runs are due, the queue is not paused, and no live worker serves it: they wait for ever."""
        return self.due > 0 and not self.paused and not self.served_by

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "unserved": self.unserved}


def slots_label(busy: int, total: int, state: str) -> str:
    """The slots column of the admin and the CLI: ``3/8``; a dead worker's busy slots are lost, not busy.

    A dead worker ran those runs when it last wrote its row; other workers take
    them back once their leases run out (``2 lost of 8``).
    """
    if state == DEAD and busy:
        return gettext("%(busy)d lost of %(total)d") % {"busy": busy, "total": total}
    return f"{busy}/{total}"


def state_of(row: WorkerProcess, now: datetime) -> str:
    if row.stopped_at is not None:
        return STOPPED
    late = timedelta(seconds=row.heartbeat_seconds * DEAD_AFTER_BEATS)
    return LIVE if row.last_seen_at + late >= now else DEAD


def _info(row: WorkerProcess, now: datetime) -> WorkerInfo:
    return WorkerInfo(
        row.worker_id,
        row.host,
        row.pid,
        row.version,
        [str(queue) for queue in row.queues or []],
        row.slots_busy,
        row.slots_total,
        row.heartbeat_seconds,
        row.started_at,
        row.last_seen_at,
        row.stopped_at,
        state_of(row, now),
    )


# -- written by workers --


def register(
    worker_id: str, *, host: str, pid: int, version: str, queues: Sequence[str], slots: int, heartbeat: timedelta
) -> None:
    """A worker starts: its row, seen now (a worker id is new each start; a reused one is overwritten)."""
    now = get_backend().now()
    WorkerProcess.objects.update_or_create(
        worker_id=worker_id,
        defaults={
            "host": host[:255],
            "pid": pid,
            "version": version[:64],
            "queues": list(queues),
            "slots_busy": 0,
            "slots_total": slots,
            "heartbeat_seconds": heartbeat.total_seconds(),
            "started_at": now,
            "last_seen_at": now,
            "stopped_at": None,
        },
    )


def beat(worker_id: str, slots_busy: int) -> bool:
    """A heartbeat: seen now, with this many slots busy. False if the row is gone (pruned while frozen)."""
    now = get_backend().now()
    return bool(
        WorkerProcess.objects.filter(worker_id=worker_id).update(
            last_seen_at=now, slots_busy=slots_busy, stopped_at=None
        )
    )


def mark_stopped(worker_id: str) -> None:
    """A worker stopped cleanly: listed as stopped at once (so its queues read unserved at once), pruned later."""
    now = get_backend().now()
    WorkerProcess.objects.filter(worker_id=worker_id).update(stopped_at=now, last_seen_at=now, slots_busy=0)


def prune_gone(keep: timedelta = KEEP_GONE) -> int:
    """Delete the rows of workers not seen for ``keep`` (stopped or dead): how many.

    A live worker is seen every heartbeat, far more often than ``keep``, so
    only gone ones match.
    """
    deleted, _ = WorkerProcess.objects.filter(last_seen_at__lt=get_backend().now() - keep).delete()
    return deleted


def paused_queues() -> set[str]:
    """The queues paused now (read by each worker at each heartbeat)."""
    return set(QueueState.objects.filter(paused=True).values_list("name", flat=True))


def claimable_queues(
    served: Sequence[str], paused: set[str], declared: Iterable[str] = (), *, read: bool = True
) -> tuple[str, ...]:
    """The queues a worker serving ``served`` claims from now: ``"*"`` expanded, paused ones left out.

    ``"*"`` is every queue an unfinished run waits in (one index probe per
    queue, :func:`~.queries.queue_names`; not read with ``read`` False),
    every ``declared`` one and ``"default"``, read again at each heartbeat:
    a run in a queue no run used before waits for at most one heartbeat.
    """
    names: Iterable[str] = served
    if ALL_QUEUES in served:
        unfinished = queue_names() if read else []
        names = sorted({DEFAULT_QUEUE, *declared, *unfinished, *(q for q in served if q != ALL_QUEUES)})
    return tuple(name for name in names if name not in paused)


# -- read by the admin, the CLI, the API, the metrics and the checks --


def workers(*, include_gone: bool = True, now: datetime | None = None) -> list[WorkerInfo]:
    """Every worker row, live ones first, then by last seen (newest first); ``now``: the database's, if read."""
    now = get_backend().now() if now is None else now
    rows = [_info(row, now) for row in WorkerProcess.objects.order_by("-last_seen_at")]
    rows.sort(key=lambda worker: worker.state != LIVE)  # stable: keeps last-seen order within each group
    return rows if include_gone else [worker for worker in rows if worker.state == LIVE]


def set_paused(name: str, paused: bool, by: str = "") -> bool:
    """Pause or resume queue ``name``; True if that changed its state. InvalidArgument for a bad queue name.

    A queue need not exist to be paused: its runs, once started, wait.
    """
    check_queue(name, "pause" if paused else "resume")
    now = get_backend().now()
    changed = (
        QueueState.objects.filter(name=name)
        .exclude(paused=paused)
        .update(paused=paused, changed_at=now, changed_by=by[:255])
    )
    if changed:
        return True
    _, created = QueueState.objects.get_or_create(
        name=name, defaults={"paused": paused, "changed_at": now, "changed_by": by[:255]}
    )
    return created and paused


def queue_overview(
    declared: Iterable[str] = (), starting: tuple[str, Sequence[str]] | None = None, *, running: bool = True
) -> list[QueueInfo]:
    """Every queue that has unfinished runs, is declared, is paused or is served by name: its state now.

    ``starting`` is a worker about to start, (its id, its queues), counted as
    live. Two aggregate queries over the claim and (status, worker_id)
    indexes (the second left out with ``running`` False: counts of 0), and
    the worker and queue rows.
    """
    now = get_backend().now()
    live = [(w.worker_id, w.queues) for w in workers(include_gone=False, now=now)]
    if starting is not None:
        live.append((starting[0], list(starting[1])))
    due = dict(
        WorkflowRun.objects.due(now).order_by().values("queue").annotate(n=Count("id")).values_list("queue", "n")
    )
    held: dict[str, int] = {}
    if running:
        held = dict(
            WorkflowRun.objects.held().order_by().values("queue").annotate(n=Count("id")).values_list("queue", "n")
        )
    paused = paused_queues()
    named = {queue for _, queues in live for queue in queues if queue != ALL_QUEUES}
    names = sorted({DEFAULT_QUEUE, *declared, *due, *held, *paused, *named})
    return [
        QueueInfo(
            name,
            due.get(name, 0),
            held.get(name, 0),
            name in paused,
            [worker_id for worker_id, queues in live if ALL_QUEUES in queues or name in queues],
        )
        for name in names
    ]


def unserved_queues() -> list[QueueInfo]:
    """The queues with due runs that are not paused and that no live worker serves (``running`` left at 0).

    Shown on every run list page, so it reads as little as it can: the due
    runs by queue (one aggregate over the claim index, by the database's
    clock), the live workers only when something is due (and the clock,
    read by a query on PostgreSQL and MariaDB), the paused queues only when
    some due queue is served by none of them.
    """
    backend = get_backend()
    due = dict(
        WorkflowRun.objects.due(backend.now_expr())
        .order_by()
        .values("queue")
        .annotate(n=Count("id"))
        .values_list("queue", "n")
    )
    if not due:
        return []
    live = workers(include_gone=False, now=backend.now())
    waiting = sorted(name for name in due if not any(worker.serves(name) for worker in live))
    paused = paused_queues() if waiting else set()
    return [QueueInfo(name, due[name], 0, False) for name in waiting if name not in paused]
