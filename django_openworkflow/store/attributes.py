"""Typed run attributes: written at a run's start or behind the fence with the journal, read and filtered on.

Values arrive checked (``definitions/attributes.py``). At a start they are
inserted with the run, in its transaction. ``ctx.set_attribute`` is
buffered by the engine as an :class:`~.records.AttributeWrite` among its
pending changes and handed to :func:`write_attributes` by the fenced
transaction of the next journal write, so a worker that lost its lease
writes none. Each carries its position in the run's deterministic
execution: a stored value is replaced only by one of a later position, so
the replay of a slice that set it writes nothing older.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet

from ..definitions.attributes import ATTRIBUTE_TYPES, AttributeCondition
from ..models import RunAttribute, WorkflowRun
from ..models.attributes import VALUE_COLUMNS
from .records import AttributeWrite

START_POSITION = -1
"""The position of a value given at the start: any ``ctx.set_attribute`` replaces it."""


def _row(run_id: Any, name: str, kind: type, value: Any, position: int) -> RunAttribute:
    columns = dict.fromkeys(VALUE_COLUMNS)
    columns[f"{ATTRIBUTE_TYPES[kind]}_value"] = value
    return RunAttribute(workflow_run_id=run_id, name=name, position=position, **columns)


def start_transaction(alias: str, attributes: bool) -> AbstractContextManager[Any]:
    """The transaction a start with ``attributes`` makes: the run and its attributes commit together."""
    return transaction.atomic(using=alias) if attributes else nullcontext()


def insert_attributes(rows: Iterable[tuple[Any, Mapping[str, tuple[type, Any]]]]) -> None:
    """The attributes of runs just started: ``(run id, {name: (type, value)})``, in the start's transaction."""
    new = [
        _row(run_id, name, kind, value, START_POSITION)
        for run_id, values in rows
        for name, (kind, value) in values.items()
    ]
    if new:
        RunAttribute.objects.bulk_create(new)


def write_attributes(run_id: Any, items: Iterable[AttributeWrite]) -> None:
    """Inside the fenced transaction: set each value whose position is later than the stored one's."""
    latest: dict[str, AttributeWrite] = {}
    for item in items:
        if item.name not in latest or latest[item.name].position < item.position:
            latest[item.name] = item
    if not latest:
        return
    # The fence holds the run's row: no other writer touches this run's attributes meanwhile.
    stored = dict(
        RunAttribute.objects.filter(workflow_run_id=run_id, name__in=list(latest)).values_list("name", "position")
    )
    for name, item in latest.items():
        if name in stored and stored[name] < item.position:
            row = _row(run_id, name, item.kind, item.value, item.position)
            RunAttribute.objects.filter(workflow_run_id=run_id, name=name).update(
                position=item.position, **{column: getattr(row, column) for column in VALUE_COLUMNS}
            )
    new = [
        _row(run_id, name, item.kind, item.value, item.position) for name, item in latest.items() if name not in stored
    ]
    if new:
        RunAttribute.objects.bulk_create(new)


def run_attributes(run_id: Any) -> dict[str, Any]:
    """The run's attributes by name, each as its type (``datetime`` in UTC)."""
    rows = RunAttribute.objects.filter(workflow_run_id=run_id).order_by("name")
    return {row.name: row.value for row in rows}


def attributes_of(run_ids: Iterable[Any]) -> dict[Any, dict[str, Any]]:
    """The attributes of several runs (a page of a list), by run id then name; one query."""
    found: dict[Any, dict[str, Any]] = {run_id: {} for run_id in run_ids}
    if found:
        for row in RunAttribute.objects.filter(workflow_run_id__in=list(found)).order_by("workflow_run_id", "name"):
            found[row.workflow_run_id][row.name] = row.value
    return found


def _condition(condition: AttributeCondition) -> Q:
    column = condition.column
    if condition.lookup == "eq":
        return Q(**{column: condition.value})
    return Q(**{f"{column}__{condition.lookup}": condition.value})


def with_attributes(queryset: QuerySet[WorkflowRun], conditions: Iterable[AttributeCondition]) -> QuerySet[WorkflowRun]:
    """The runs of ``queryset`` whose attributes meet every condition (one semi-join each, on a (name, value) index)."""
    for condition in conditions:
        matching = RunAttribute.objects.filter(Q(name=condition.name) & _condition(condition))
        queryset = queryset.filter(id__in=matching.values("workflow_run_id"))
    return queryset
