"""Re-encrypt stored payloads to the first key of ``OPENWORKFLOW["PAYLOAD_ENCRYPTION"]`` (``workflows rotate-keys``).

Every payload column (``PAYLOAD_COLUMNS``) is walked in primary-key order, a
batch at a time. A row is read only when its value is not yet in the form
the settings give now: SQL leaves out the values already sealed with the
first key (a text prefix, ``owfenc:1:<id of the first key>:``), so a second
pass, or a pass resumed after an interruption, reads only what is left.
Plain values written before encryption was turned on are encrypted by the
same pass; with ``ENCRYPT_ERRORS`` False, errors' messages and tracebacks
are written back in clear.

Each rewrite is a compare-and-set: ``UPDATE ... SET col = <new> WHERE pk =
<pk> AND col = <the stored form this pass read>``, in one short transaction
per batch. A worker that holds a run writes its rows (a step's result, the
run's output, a published value) under its lease, whose fence says nothing
about this pass; the comparison does: when the worker wrote first, the
pass's update matches no row and its stale value is dropped (counted as
``changed``); when the pass wrote first, the worker's write replaces it
whole, sealed with the worker's own first key. Nothing a worker writes is
lost. A value no configured key opens is left as it is and counted.

An offloaded value (``offload.py``) holds only a reference in its row, so
SQL cannot tell which key sealed it: its rows are always read, and its file
tells. A file already sealed with the first key is left; any other is
written again (a new file, under the first key) and the old file is deleted
once the batch commits. A value whose file is missing is left and counted
as unreadable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import models, transaction
from django.db.models import Q, TextField, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.db.models.lookups import Exact

from .. import encryption, offload
from ..models import Approval, Event, PublishedValue, Signal, StepAttempt, StreamChunk, WorkflowRun
from ..models.fields import ErrorField, PayloadField, PayloadTextField
from . import get_backend, payload_files

PAYLOAD_COLUMNS: tuple[tuple[type[models.Model], str], ...] = (
    (WorkflowRun, "input"),
    (WorkflowRun, "output"),
    (WorkflowRun, "error"),
    (StepAttempt, "output"),
    (StepAttempt, "error"),
    (Signal, "data"),
    (Event, "payload"),
    (PublishedValue, "value"),
    (StreamChunk, "data"),
    (Approval, "details"),
    (Approval, "comment"),
    (Approval, "initial"),
    (Approval, "signoffs"),
)
"""Every column encryption covers, as (model, field name)."""

ERROR_TEXT_PATHS = tuple(
    [f"error__{key}" for key in encryption.ERROR_TEXT_KEYS]
    + [f"error__{nested}__{key}" for nested in encryption.NESTED_ERROR_KEYS for key in encryption.ERROR_TEXT_KEYS]
)


@dataclass
class ColumnProgress:
    """What a pass did to one column so far."""

    table: str
    column: str
    rewritten: int = 0
    undecryptable: int = 0  # or, for an offloaded value, whose file is missing
    changed: int = 0  # written by someone else between this pass's read and its update: left to them

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"


def _pending(model: type[models.Model], name: str, ring: encryption.Keyring) -> models.QuerySet[Any]:
    """The rows of ``model`` whose ``name`` is not in the form the settings give now (SQL's part of the test)."""
    field = model._meta.get_field(name)
    queryset = model._default_manager.all()
    current = f"{encryption.PREFIX}{ring.current_id}:"
    if isinstance(field, ErrorField):
        condition = Q()
        for index, path in enumerate(ERROR_TEXT_PATHS):
            alias = f"owf_text_{index}"
            queryset = queryset.alias(**{alias: KT(path)})
            if ring.encrypt_errors:  # a text in clear, or sealed with another key
                condition |= Q(**{f"{alias}__isnull": False}) & ~Q(**{f"{alias}__startswith": current})
            else:  # a sealed text, to write back in clear
                condition |= Q(**{f"{alias}__startswith": encryption.PREFIX})
        return queryset.filter(condition)
    queryset = queryset.exclude(**{f"{name}__isnull": True})
    if isinstance(field, PayloadTextField):
        return queryset.exclude(**{name: ""}).exclude(**{f"{name}__startswith": current})
    # A JSON string's stored form starts with its opening quote.
    return queryset.alias(owf_stored=Cast(name, TextField())).exclude(owf_stored__startswith=f'"{current}')


def _column(model: type[models.Model], name: str) -> str:
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column, name
    return field.column


def _needs_writing(value: Any, ring: encryption.Keyring, is_error: bool) -> bool | None:
    """Whether an opened value must be written again; None when part of it cannot be decrypted."""
    if is_error:
        if not isinstance(value, dict):
            return False
        texts = [value.get(key) for key in encryption.ERROR_TEXT_KEYS]
        for nested in encryption.NESTED_ERROR_KEYS:
            child = value.get(nested)
            if isinstance(child, dict):
                texts += [child.get(key) for key in encryption.ERROR_TEXT_KEYS]
        if any(encryption.is_undecryptable(text) for text in texts):
            return None
        return any(isinstance(text, str) for text in texts)
    return None if encryption.is_unreadable(value) else True


def _stored_value(field: Any, value: Any, ring: encryption.Keyring) -> Any:
    """What an update writes: for a JSON payload, its stored form made here (so a file written for a row the
    compare-and-set then misses can be deleted), as an expression the field leaves alone; else the value."""
    if not isinstance(field, PayloadField):
        return value
    return Value(offload.to_stored(value, field.encoder, ring), output_field=models.JSONField())


def _stored_text(stored: Any) -> str:
    return bytes(stored).decode("utf-8") if isinstance(stored, bytes | memoryview) else str(stored)


def _offloaded_and_current(stored: Any, ring: encryption.Keyring) -> tuple[str | None, bool]:
    """The reference a stored form holds (or None), and whether its file is already sealed with the first key."""
    text = _stored_text(stored)
    if not text.startswith(f'"{offload.REFERENCE_PREFIX}'):
        return None, False
    reference = str(json.loads(text))
    file_text = offload.read_file_text(reference)
    return reference, file_text is not None and file_text.startswith(f'"{encryption.PREFIX}{ring.current_id}:')


def rotate_column(
    model: type[models.Model], name: str, *, batch_size: int = 500, on_batch: Callable[[ColumnProgress], None] | None
) -> ColumnProgress:
    """Write every value of one column again in the form the settings give now; see the module's docstring."""
    ring = encryption.keyring()
    if ring is None:
        raise ValueError("OPENWORKFLOW['PAYLOAD_ENCRYPTION'] is not set: there is no key to encrypt with")
    backend = get_backend()
    field = model._meta.get_field(name)
    is_error = isinstance(field, ErrorField)
    progress = ColumnProgress(model._meta.db_table, _column(model, name))
    for batch in _batches(model, name, ring, batch_size):
        writes = []
        for pk, stored, value in batch:
            reference, current = (None, False) if is_error else _offloaded_and_current(stored, ring)
            needed = False if current else _needs_writing(value, ring, is_error)
            if needed is None:
                progress.undecryptable += 1
            elif needed:  # a new file, if any, is written here: not while the batch's transaction holds locks
                writes.append((pk, stored, _stored_value(field, value, ring), reference))

        def write(writes: list[tuple[Any, Any, Any, str | None]] = writes) -> tuple[int, int]:
            rewritten = changed = 0
            with backend.write_lock(), transaction.atomic(using=backend.alias):
                replaced = []
                for pk, stored, new, reference in writes:
                    unchanged = Exact(backend.stored_form(name), stored)
                    if model._default_manager.filter(unchanged, pk=pk).update(**{name: new}):
                        rewritten += 1
                        replaced += [reference] if reference is not None else []
                    else:
                        changed += 1
                        if isinstance(new, Value) and offload.is_reference(new.value):
                            offload.delete_files([new.value])  # the file of a value no row took
                payload_files.delete_on_commit(replaced, backend.alias)
            return rewritten, changed

        rewritten, changed = backend.retrying(write) if writes else (0, 0)
        progress.rewritten += rewritten
        progress.changed += changed
        if on_batch is not None:
            on_batch(progress)
    return progress


def _batches(
    model: type[models.Model], name: str, ring: encryption.Keyring, batch_size: int
) -> Iterator[list[tuple[Any, Any, Any]]]:
    """(pk, stored form, opened value) of the pending rows, ``batch_size`` at a time, in primary-key order."""
    backend = get_backend()
    last = None
    while True:
        queryset = _pending(model, name, ring)
        if last is not None:
            queryset = queryset.filter(pk__gt=last)
        rows = list(
            queryset.annotate(owf_stored_form=backend.stored_form(name))
            .order_by("pk")
            .values_list("pk", "owf_stored_form", name)[:batch_size]
        )
        if not rows:
            return
        yield rows
        last = rows[-1][0]


def pending_counts() -> list[tuple[str, int]]:
    """How many values of each column are not yet in the form the settings give now (``rotate-keys --check``).

    An offloaded value is counted by its file, which is opened (not decrypted) to read the key id.
    """
    ring = encryption.keyring()
    if ring is None:
        raise ValueError("OPENWORKFLOW['PAYLOAD_ENCRYPTION'] is not set: there is no key to encrypt with")
    return [
        (f"{model._meta.db_table}.{_column(model, name)}", _pending_count(model, name, ring))
        for model, name in PAYLOAD_COLUMNS
    ]


def _pending_count(model: type[models.Model], name: str, ring: encryption.Keyring) -> int:
    pending = _pending(model, name, ring)
    if not isinstance(model._meta.get_field(name), PayloadField):
        return int(pending.count())
    offloaded = Q(owf_stored__startswith=f'"{offload.REFERENCE_PREFIX}')
    count = int(pending.exclude(offloaded).count())
    stored = pending.filter(offloaded).annotate(owf_text=Cast(name, TextField())).values_list("owf_text", flat=True)
    return count + sum(1 for text in stored.iterator() if not _offloaded_and_current(text, ring)[1])
