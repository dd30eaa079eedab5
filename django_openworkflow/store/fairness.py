"""Fair queues: where a run of a fairness key is placed in line, and the runs a fair claim adopts.

In a queue listed in ``OPENWORKFLOW["FAIR_QUEUES"]`` every run has a
fairness key (``WorkflowSpec.flow_fields``) and a place in line,
``fair_at``, which the claim orders by within a priority instead of the
due time. A run's place is its due time, or one quantum
(``OPENWORKFLOW["FAIRNESS_QUANTUM"]``) after the last place of its key's
waiting runs, whichever is later. A key that floods the queue with 10,000
runs spreads them over 10,000 quanta; a key with a few runs places them
from now on, so its runs are claimed among the flood's next ones, not after
it: the keys take turns. A key's place is read when a run is started: two
runs of one key started at once by two processes may share a place (a tie
the due time breaks), which costs a turn, never a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from django.db.models import Case, DateTimeField, F, Subquery, Value, When
from django.db.models.functions import Coalesce

from ..conf import owf_settings
from ..definitions.flow import BLOCKED_UNTIL
from ..models import WorkflowRun
from ..states import RunStatus

KEYS_A_QUERY = 100
"""Starts of many keys (``run_many``) read the keys' last places this many a query."""

ADOPT_AT_MOST = 1000
"""A claim that found too few fair runs gives at most this many keyless due runs a place (see :func:`adopt`)."""


def fair_queues(queues: Sequence[str]) -> list[str]:
    """The queues among ``queues`` that are claimed fairly, in their order."""
    fair = owf_settings.fair_queues
    return [queue for queue in queues if queue in fair] if fair else []


def claim_order() -> tuple[Any, ...]:
    """The claim's order as ``order_by`` arguments, for a list of runs of any queues (``testing.drain``)."""
    place = Coalesce("fair_at", "available_at") if owf_settings.fair_queues else F("available_at")
    return ("-priority", place, "available_at")


def places_in_line(starts: Sequence[tuple[str | None, datetime]]) -> list[datetime | None]:
    """The place in line of each start given as (fairness key or None, due time), in order.

    One indexed read per key (``owf_run_fair_tail_idx``), the last place of
    its waiting runs, all in one query. Starts of one key in one call follow
    one another a quantum apart.
    """
    quantum = owf_settings.fairness_quantum
    last = _last_places(sorted({key for key, _ in starts if key is not None}))
    places: list[datetime | None] = []
    for key, due in starts:
        if key is None:
            places.append(None)
            continue
        previous = last[key]
        place = due if previous is None else max(due, previous + quantum)
        last[key] = place
        places.append(place)
    return places


def _last_places(keys: list[str]) -> dict[str, datetime | None]:
    """The last place of each key's waiting runs (None: none waits), up to 100 keys a query.

    Each key is a scalar subquery that reads one entry of its index, and a
    query asks for up to 100 of them as the columns of one row (of any run:
    an empty table has no key waiting either).
    """
    last: dict[str, datetime | None] = dict.fromkeys(keys)
    for start in range(0, len(keys), KEYS_A_QUERY):
        chunk = keys[start : start + KEYS_A_QUERY]
        tails = {
            f"k{index}": Subquery(
                # Runs set aside by their limit until woken (placed at BLOCKED_UNTIL) hold no place
                # in line: counted, they would put every later start of the key after the year 9999.
                WorkflowRun.objects.filter(fairness_key=key, status=RunStatus.PENDING, fair_at__lt=BLOCKED_UNTIL)
                .order_by("-fair_at")
                .values("fair_at")[:1]
            )
            for index, key in enumerate(chunk)
        }
        row = WorkflowRun.objects.order_by().annotate(**tails).values_list(*tails).first()
        if row is not None:
            last.update(zip(chunk, row, strict=True))
    return last


def place_of(key: str | None, due: datetime) -> datetime | None:
    """The place in line of one start of ``key`` (None without a key), due at ``due``."""
    return places_in_line([(key, due)])[0] if key is not None else None


def place_rows(rows: Sequence[dict[str, Any]], now: datetime) -> None:
    """Give each row (a start's columns) with a fairness key its place in line; due now if it names no time."""
    keyed = [row for row in rows if row.get("fairness_key") is not None]
    if keyed:
        places = places_in_line([(row["fairness_key"], row.get("available_at") or now) for row in keyed])
        for row, place in zip(keyed, places, strict=True):
            row["fair_at"] = place


def place_runs(runs: Sequence[WorkflowRun]) -> None:
    """:func:`place_rows` for unsaved run objects (children and successors, due at their ``available_at``)."""
    keyed = [run for run in runs if run.fairness_key is not None]
    if keyed:
        places = places_in_line([(run.fairness_key, run.available_at) for run in keyed])
        for run, place in zip(keyed, places, strict=True):
            run.fair_at = place


def moved_to(due: Any) -> Case:
    """``fair_at`` for an UPDATE that makes runs due at ``due`` (a time or the clock's SQL), to the back of the line.

    A run its concurrency or rate limit sets aside, or wakes, takes its new
    due time as its place (runs without a place keep none): the fair claim
    does not read past the runs waiting for a place on every claim.
    """
    value = due if hasattr(due, "resolve_expression") else Value(due)
    return Case(When(fair_at__isnull=True, then=Value(None)), default=value, output_field=DateTimeField())


def adopt(queues: Sequence[str], now: datetime, write_lock: Callable[[], AbstractContextManager[Any]]) -> int:
    """Give the due runs of fair ``queues`` that have no place one; how many got one.

    Runs started before their queue was listed in ``FAIR_QUEUES`` (or by a
    process whose settings did not list it) have no place, and the fair
    claim reads only runs that have one. A claim that finds fewer runs than
    it wants calls this: such a run gets its concurrency key, else its
    workflow's name, as its key, and its due time as its place. A plain
    read first (an idle worker's claims find none): only then the write,
    under ``write_lock``.
    """
    keyless = WorkflowRun.objects.due(now).filter(queue__in=list(queues), fair_at__isnull=True)
    ids = list(keyless.order_by().values_list("id", flat=True)[:ADOPT_AT_MOST])
    if not ids:
        return 0
    with write_lock():
        return int(
            WorkflowRun.objects.filter(id__in=ids, fair_at__isnull=True).update(
                fairness_key=Coalesce("fairness_key", "concurrency_key", "workflow_name"), fair_at=F("available_at")
            )
        )
