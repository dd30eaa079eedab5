"""Creating, reading, canceling, waking and retrying runs (the client's, the CLI's and the admin's side)."""

from __future__ import annotations

import functools
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.constants import OnConflict
from django.db.models.functions import Coalesce
from django.utils import timezone

from .. import tracing
from ..definitions.flow import DEFAULT_QUEUE, PROBE_INTERVAL
from ..models import StepAttempt, WorkflowRun
from ..states import RunStatus, StepKind, StepStatus
from .fairness import moved_to, place_rows
from .journal import JournalOps
from .records import StartedRun

_MISSING = object()

COPY_AT_LEAST = 100
"""Plain starts of at least this many runs go in one COPY where the database has it."""

INSERT_BATCH = 1_000
"""Rows of one multi-row INSERT at most (fewer where the database allows fewer parameters)."""

QUIET_KEYS_KEPT = 10_000
"""At most this many keys are remembered as having nobody waiting (``free_place``)."""


class RunOps(JournalOps):
    """Run-level operations that do not need to hold the run."""

    def insert_run(
        self,
        *,
        workflow_name: str,
        version: str | None,
        input: Any,
        available_at: datetime | None,
        deadline_at: datetime | None,
        idempotency_key: str | None,
        flow: dict[str, Any] | None = None,
        debounce: tuple[str, timedelta, timedelta | None] | None = None,
    ) -> tuple[StartedRun, bool]:
        """Insert a pending run; returns (run, created).

        With an idempotency key the unique constraint decides: a concurrent or
        earlier start with the same (workflow name, key) returns that run instead.
        ``flow`` holds the queue, priority and limit columns. ``debounce``
        (key, delay, longest delay) folds the start into a pending run with
        that key, if there is one (see :meth:`_debounce`).
        """
        fields = dict(
            workflow_name=workflow_name,
            version=version,
            status=RunStatus.PENDING,
            input=input,
            available_at=available_at,
            deadline_at=deadline_at,
            idempotency_key=idempotency_key,
            **(flow or {}),
        )
        if debounce is not None:
            return self._debounce(fields, *debounce)
        if idempotency_key is None:
            return self._insert_one(fields), True
        try:
            with transaction.atomic(using=self.alias):
                return self._insert_one(fields), True
        except IntegrityError:
            existing = WorkflowRun.objects.filter(workflow_name=workflow_name, idempotency_key=idempotency_key).first()
            if existing is None:  # the clashing row was rolled back meanwhile
                return self._insert_one(fields), True
            return StartedRun(existing.id, existing.queue), False

    def _insert_one(self, fields: dict[str, Any]) -> StartedRun:
        self._insert_rows([fields])
        return StartedRun(fields["id"], fields.get("queue") or DEFAULT_QUEUE)

    def _insert_rows(self, rows: list[dict[str, Any]], *, ignore_conflicts: bool = False) -> None:
        """INSERT runs, given as column values, many rows a statement; sets each row's ``id``.

        A start is what a view pays, and Django's ``create`` and
        ``bulk_create`` compile every column of every row through the field
        machinery, which costs more than the database's own insert. This
        statement names only the columns the rows give (plus those with
        defaults), adapts each value once with its field, and is written
        with Django's own per-database pieces: placeholders, ``INSERT ...
        IGNORE`` or ``ON CONFLICT DO NOTHING``, batch sizes. A row without
        ``available_at`` is due at the database clock's now. Each run carries
        its starter's trace context (tracing.py), like the ORM's inserts.
        """
        if not rows:
            return
        if any(row.get("fairness_key") is not None for row in rows):
            place_rows(rows, self.now())  # runs of fair queues: their places in line
        trace_context = tracing.current_context()  # None with tracing off
        if trace_context is not None:
            for row in rows:
                row.setdefault("trace_context", trace_context)
        connection = self.connection
        now = timezone.now()
        defaults = {"status": RunStatus.PENDING, "available_at": None, "created_at": now, "updated_at": now}
        # A column no row gives a value is left out: it is NULL all the same (no database defaults).
        named = frozenset(name for row in rows for name in row)
        given = frozenset(name for row in rows for name, value in row.items() if value is not None)
        columns = self._insert_columns(named, given | frozenset(defaults))
        # Many plain rows go in one COPY where the database has one: it needs values, not SQL.
        copy = not ignore_conflicts and len(rows) >= COPY_AT_LEAST and type(self).copy_rows is not RunOps.copy_rows
        db_now = self.now() if copy else self.now_expr()
        db_now_sql = "%s" if isinstance(db_now, datetime) else self._now_sql()
        shape: list[str] = []  # each row's placeholders: the statement's text depends on nothing else
        params: list[list[Any]] = []  # each row's parameters (the clock's SQL takes none)
        # Most columns hold the same object in every row (the name, the queue, the times):
        # each column adapts a value once and reuses it while the next row's is that object.
        adapted: list[tuple[Any, Any]] = [(_MISSING, None)] * len(columns)
        for row in rows:
            row.setdefault("id", uuid.uuid4())
            row_params = []
            for index, field in enumerate(columns):
                value = row.get(field.attname, defaults.get(field.attname, _MISSING))
                if value is _MISSING:
                    value = field.get_default()
                elif value is None and field.attname == "available_at":
                    value = db_now
                if isinstance(value, datetime) or not hasattr(value, "resolve_expression"):
                    shape.append("%s")
                    last, param = adapted[index]
                    if value is not last:
                        param = field.get_db_prep_save(value, connection)
                        adapted[index] = (value, param)
                    row_params.append(param)
                elif value is db_now:
                    shape.append(db_now_sql)
                else:
                    raise TypeError(f"cannot insert the expression {value!r} into {field.attname}")
            params.append(row_params)
        if copy:
            self.copy_rows(columns, params)
            return
        width = len(columns)
        names = tuple(field.attname for field in columns)
        # At most 1,000 rows a statement: every full batch has one text, which the driver parses once.
        batch = max(1, min(INSERT_BATCH, connection.ops.bulk_batch_size(columns, rows)))
        for start in range(0, len(rows), batch):
            end = min(start + batch, len(rows))
            sql = self._insert_sql(names, tuple(shape[start * width : end * width]), ignore_conflicts)
            # A single start's statement, or a full batch's, comes again; another size may not.
            values = [param for row_params in params[start:end] for param in row_params]
            self.execute_hot(sql, values, prepare=end - start in (1, INSERT_BATCH))

    def copy_rows(self, columns: list[Any], rows: list[list[Any]]) -> None:
        """Write rows of ``columns`` (values adapted by their fields) with the database's bulk load.

        Only databases that have one override this (PostgreSQL's COPY);
        elsewhere :meth:`_insert_rows` writes multi-row INSERTs.
        """
        raise NotImplementedError

    @functools.lru_cache(maxsize=64)  # noqa: B019 (one backend per alias, for the process's life)
    def _insert_columns(self, named: frozenset[str], given: frozenset[str]) -> list[Any]:
        """The run columns a start writes: those ``given`` a value, and those with defaults.

        A ``named`` key that is no column is a mistake, not a column to leave out.
        """
        fields = WorkflowRun._meta.concrete_fields
        unknown = named - {field.attname for field in fields}
        if unknown:
            raise TypeError(f"not columns of a run: {', '.join(sorted(unknown))}")
        return [field for field in fields if field.attname in given or field.has_default()]

    @functools.cache  # noqa: B019
    def _now_sql(self) -> str:
        """The SQL of the database clock's now (``now_expr()``), which has no parameters."""
        query = WorkflowRun.objects.none().query
        sql, params = query.get_compiler(using=self.alias).compile(self.now_expr().resolve_expression(query))
        if params:
            raise TypeError(f"the database clock compiles to SQL with parameters: {sql}")
        return str(sql)

    @functools.lru_cache(maxsize=256)  # noqa: B019
    def _insert_sql(self, columns: tuple[str, ...], placeholders: tuple[str, ...], ignore_conflicts: bool) -> str:
        """The INSERT statement for rows of ``columns`` with these placeholders, row after row."""
        ops = self.connection.ops
        fields = [field for name in columns for field in WorkflowRun._meta.concrete_fields if field.attname == name]
        on_conflict = OnConflict.IGNORE if ignore_conflicts else None
        width = len(columns)
        rows = ", ".join(
            f"({', '.join(placeholders[start : start + width])})" for start in range(0, len(placeholders), width)
        )
        tail = ops.on_conflict_suffix_sql(fields, on_conflict, None, None) or ""
        return (
            f"{ops.insert_statement(on_conflict=on_conflict)} {ops.quote_name(WorkflowRun._meta.db_table)} "
            f"({', '.join(ops.quote_name(str(field.column)) for field in fields)}) VALUES {rows} {tail}"
        ).rstrip()

    def _debounce(
        self, fields: dict[str, Any], key: str, delay: timedelta, max_delay: timedelta | None
    ) -> tuple[StartedRun, bool]:
        """Fold a start into the run with this debounce key that no worker has claimed yet, or create it.

        The pending run takes this start's input and is put off until
        ``delay`` from now (no later than ``max_delay`` after it was first
        started). The unique (workflow, debounce key) constraint makes two
        concurrent first starts one run; the claim clears the key, so a start
        after that creates the next run. On MariaDB two first starts can also
        deadlock (each locking read locks the gap the other's insert needs):
        the victim starts again, whole (:meth:`retrying`), and folds in.
        """
        workflow_name = fields["workflow_name"]

        def fold_or_insert() -> tuple[StartedRun, bool] | None:
            with transaction.atomic(using=self.alias):
                now = self.now()
                existing = (
                    WorkflowRun.objects.select_for_update()
                    .filter(workflow_name=workflow_name, debounce_key=key, status=RunStatus.PENDING)
                    .first()
                )
                if existing is not None:
                    until = now + delay
                    if max_delay is not None:
                        until = min(until, existing.created_at + max_delay)
                    WorkflowRun.objects.filter(id=existing.id).update(
                        input=fields["input"], available_at=until, updated_at=now
                    )
                    return StartedRun(existing.id, existing.queue), False
                try:
                    with transaction.atomic(using=self.alias):
                        row = {**fields, "available_at": now + delay, "debounce_key": key}
                        self._insert_rows([row])
                        return StartedRun(row["id"], row.get("queue") or DEFAULT_QUEUE), True
                except IntegrityError:
                    return None  # a concurrent first start won: fold into its run

        for _ in range(3):
            started = self.retrying(fold_or_insert)
            if started is not None:
                return started
        raise IntegrityError(f"debounce key {key!r} of workflow {workflow_name!r}: no run to fold the start into")

    def get_run(self, run_id: Any) -> WorkflowRun | None:
        return WorkflowRun.objects.filter(id=run_id).first()

    def parent_run_id(self, run_id: Any) -> Any:
        """The id of the run that started this one as a child, or None."""
        return StepAttempt.objects.filter(child_runs__id=run_id).values_list("workflow_run_id", flat=True).first()

    def child_run_ids(self, run_id: Any) -> list[Any]:
        """The ids of the runs this one started as children, oldest first."""
        children = WorkflowRun.objects.filter(parent_step_attempt__workflow_run_id=run_id).order_by("created_at")
        return list(children.values_list("id", flat=True))

    def insert_runs(self, runs: list[dict[str, Any]]) -> list[tuple[Any, bool]]:
        """Insert pending runs in a few statements; returns ``(id, created)`` for each, in order.

        A run given no ``available_at`` is due now. A row whose
        ``idempotency_key`` its workflow already has, or an earlier row of
        the same call has, is not inserted: it gets that run's id, with
        ``created`` False. Keyed rows are inserted skipping those that clash
        (``ON CONFLICT DO NOTHING`` and its equivalents), then the ids of
        every key are read back in one query, so a concurrent start with a
        key is decided by the unique constraint, as for ``insert_run``.
        """
        rows = [{**fields, "available_at": fields.get("available_at")} for fields in runs]
        first: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            if row.get("idempotency_key") is not None:
                first.setdefault((row["workflow_name"], row["idempotency_key"]), row)
        plain = [row for row in rows if row.get("idempotency_key") is None]
        with transaction.atomic(using=self.alias):
            self._insert_rows(plain)
            if not first:
                return [(row["id"], True) for row in rows]
            self._insert_rows(list(first.values()), ignore_conflicts=True)
            names = {name for name, _ in first}
            keys = {key for _, key in first}
            found = WorkflowRun.objects.filter(workflow_name__in=names, idempotency_key__in=keys)
            ids = {
                (name, key): run_id for name, key, run_id in found.values_list("workflow_name", "idempotency_key", "id")
            }
        results = []
        for row in rows:
            if row.get("idempotency_key") is None:
                results.append((row["id"], True))
            else:
                key = (row["workflow_name"], row["idempotency_key"])
                results.append((ids[key], row is first[key] and ids[key] == row["id"]))
        return results

    def cancel_run(self, run_id: Any) -> bool:
        """Cancel a run that has not finished; False if it already had.

        Its open steps are closed, its children are closed by their
        parent-close policy, and a parent waiting on it is woken so that its
        wait step fails.
        """
        return bool(self.cancel_runs([run_id]))

    def cancel_runs(self, run_ids: list[Any]) -> list[Any]:
        """Cancel many runs in one transaction (the admin's "select all"); returns the ids it canceled.

        Racing a worker's commit, the database may pick this transaction as
        a deadlock's victim: it is tried again (:meth:`retrying`).
        """
        targets = self.retrying(lambda: self._cancel(run_ids))
        ids = [run_id for run_id, _, _ in targets]
        # A canceled run may have held a place, or been the run asking for one for the others.
        for key in sorted({key for _, _, key in targets if key is not None}):
            self.free_place(key)
        return ids

    def request_cancel(self, run_ids: list[Any]) -> list[Any]:
        """Ask a worker to cancel these runs after running their compensations; returns the ids asked.

        A run no worker holds is made due now; its next slice replays the
        journal, runs the compensations of its completed steps and ends it
        as canceled. A run a worker holds keeps its worker, so the steps
        that worker completed stay in the journal (taking the run away
        would lose those not written yet, and they would never be undone):
        the slice's next write that would start something or end the run
        sees the request in its fence (``fence.py``), keeps the
        completions it carried and starts nothing; the slice compensates.
        """
        now = self.now()
        with self.write_lock(), transaction.atomic(using=self.alias):
            asked = list(
                WorkflowRun.objects.claimable()
                .select_for_update()
                .filter(id__in=run_ids, cancel_requested_at__isnull=True)
                .values_list("id", flat=True)
            )
            WorkflowRun.objects.filter(id__in=asked).update(cancel_requested_at=now, updated_at=now)
            WorkflowRun.objects.filter(id__in=asked, worker_id__isnull=True).update(
                status=RunStatus.RUNNING, available_at=now
            )
        return asked

    def _cancel(self, run_ids: list[Any]) -> list[tuple[Any, Any, Any]]:
        now = self.now()
        with transaction.atomic(using=self.alias):
            targets = list(
                WorkflowRun.objects.claimable()
                .select_for_update()
                .filter(id__in=run_ids)
                .values_list("id", "parent_step_attempt_id", "concurrency_key")
            )
            ids = [run_id for run_id, _, _ in targets]
            WorkflowRun.objects.filter(id__in=ids).update(
                status=RunStatus.CANCELED, worker_id=None, finished_at=now, updated_at=now
            )
            # A step a worker is executing is closed too (that worker's own write is fenced out).
            self._close_open_steps(ids, now)
            self.close_children(ids, now)  # by their parent-close policy, in the same transaction
            for _, parent_step, _ in targets:
                if parent_step is not None:
                    self.wake_parent(parent_step, now, ended_badly=True)
        return targets

    def free_place(self, concurrency_key: str, *, skip_if_quiet: bool = False) -> tuple[uuid.UUID, str] | None:
        """A run of this key let go of its place: make the first run waiting for one due now; its (id, queue).

        Called by workers when a slice ends, and by cancel; the waiting runs'
        own probe (:data:`PROBE_INTERVAL`) covers a call that never comes (a crash).
        With ``skip_if_quiet`` (workers), a key this process found nobody
        waiting under within the last :data:`PROBE_INTERVAL` is not read
        again, unless a claim here has set a run of it aside since: under a
        limit that never binds, a slice costs no extra query.
        """
        if skip_if_quiet and self._quiet_keys.get(concurrency_key, 0.0) > time.monotonic():
            return None
        waiting = WorkflowRun.objects.claimable().filter(
            concurrency_key=concurrency_key, blocked_at__isnull=False, worker_id__isnull=True
        )
        # A plain read first: usually nobody waits, and then nothing is written.
        first = waiting.order_by("-priority", "blocked_at", "created_at").values_list("id", "queue").first()
        if first is None:
            if len(self._quiet_keys) > QUIET_KEYS_KEPT:
                self._quiet_keys.clear()
            self._quiet_keys[concurrency_key] = time.monotonic() + PROBE_INTERVAL.total_seconds()
            return None
        with self.write_lock():
            now = self.now_expr()
            woken = waiting.filter(id=first[0]).update(available_at=now, fair_at=moved_to(now))
        return first if woken else None

    def wake_run(self, run_id: Any) -> bool:
        """ "Retry now" for one run (see :meth:`wake_runs`)."""
        return bool(self.wake_runs([run_id]))

    def wake_runs(self, run_ids: list[Any]) -> list[Any]:
        """ "Retry now": make parked, backing-off or scheduled runs due immediately; returns the ids woken.

        A sleep in progress ends now; a retry backoff is skipped; a wait for a
        child simply re-checks the child. A run held by a worker is left alone
        (its lease decides).
        """
        now = self.now()
        with transaction.atomic(using=self.alias):
            asleep = WorkflowRun.objects.claimable().filter(
                id__in=run_ids, worker_id__isnull=True, available_at__gt=now
            )
            ids = list(asleep.select_for_update().values_list("id", flat=True))
            WorkflowRun.objects.filter(id__in=ids).update(available_at=now, updated_at=now)
            StepAttempt.objects.filter(workflow_run_id__in=ids, kind=StepKind.SLEEP, status=StepStatus.RUNNING).update(
                context={"resume_at": now.isoformat(), "woken_early": True}
            )
        return ids

    def retry_failed_run(self, run_id: Any) -> bool:
        """Retry one failed run from its failed step (see :meth:`retry_failed_runs`)."""
        return bool(self.retry_failed_runs([run_id]))

    def retry_failed_runs(self, run_ids: list[Any]) -> list[Any]:
        """Send failed runs back to pending; completed steps keep their outputs. Returns the ids sent back.

        ``attempts`` is left as is: it counts failed workflow-level attempts, and
        the failure already counted itself, which gives the failed step a fresh
        retry budget (budgets count failures per workflow attempt).
        """
        now = self.now_expr()
        with transaction.atomic(using=self.alias):
            failed = WorkflowRun.objects.filter(id__in=run_ids, status=RunStatus.FAILED)
            ids = list(failed.select_for_update().values_list("id", flat=True))
            WorkflowRun.objects.filter(id__in=ids).update(
                status=RunStatus.PENDING,
                error=None,
                finished_at=None,
                worker_id=None,
                available_at=now,
                updated_at=now,
                # Priority aging's levels were for a wait that is over: the retry waits from its declared priority.
                # (Before declared_priority: MySQL's SET reads the columns the SET before it wrote.)
                priority=Coalesce("declared_priority", "priority"),
                declared_priority=None,
            )
        return ids
