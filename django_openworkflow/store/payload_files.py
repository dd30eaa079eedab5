"""Offloaded payloads' files (``offload.py``): which rows reference which, deleted with their rows, orphans.

Retention and erasure find the references a run's rows hold before they
delete or clear the rows, and delete the files with
``transaction.on_commit``: a delete (or an erasure) that rolls back keeps its
files, and a file is never gone while a committed row still references it.
References are read in SQL, as the stored text (a JSON string starting with
``"owfref:1:``), so finding them opens no file and decrypts nothing.

A file no row references is an orphan: a value written in a transaction
that rolled back, a value overwritten (a re-encrypted one, a retried
step's), or a row deleted by hand. ``workflows payload-files`` lists them,
and deletes those older than a margin (a file is written before its row's
transaction commits).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import TextField
from django.db.models.functions import Cast

from .. import offload, task_files
from ..models import Approval, Event, PublishedValue, Signal, StepAttempt, StreamChunk, WorkflowRun
from ..models.fields import PayloadField

OFFLOADABLE_COLUMNS: tuple[tuple[type[models.Model], str, str | None], ...] = (
    (WorkflowRun, "input", "id"),
    (WorkflowRun, "output", "id"),
    (StepAttempt, "output", "workflow_run_id"),
    (Signal, "data", "workflow_run_id"),
    (PublishedValue, "value", "workflow_run_id"),
    (StreamChunk, "data", "workflow_run_id"),
    (Approval, "initial", "workflow_run_id"),
    (Approval, "signoffs", "workflow_run_id"),
    (Event, "payload", None),
)
"""Every column a value may be offloaded from, as (model, field name, the field naming the run, if any)."""


def managed() -> bool:
    """Whether files are looked for when rows go (``PAYLOAD_OFFLOAD`` set, even with ``THRESHOLD`` None)."""
    return offload.policy().storage is not None


def references(queryset: models.QuerySet[Any], name: str) -> list[str]:
    """The references the column ``name`` of these rows holds (read as stored: no file is opened)."""
    field = queryset.model._meta.get_field(name)
    assert isinstance(field, PayloadField), name
    stored = queryset.annotate(owf_stored=Cast(name, TextField())).filter(
        owf_stored__startswith=f'"{offload.REFERENCE_PREFIX}'
    )
    return [_reference(text) for text in stored.values_list("owf_stored", flat=True)]


def _reference(stored_text: Any) -> str:
    """The reference a stored JSON string holds, from its text (quotes included)."""
    if isinstance(stored_text, bytes | memoryview):
        stored_text = bytes(stored_text).decode("ascii")
    return str(json.loads(stored_text))


def references_of_runs(run_ids: list[Any]) -> list[str]:
    """The references every row of these runs holds (their inputs, outputs, journals, messages, progress)."""
    found: list[str] = []
    for model, name, run_field in OFFLOADABLE_COLUMNS:
        if run_field is not None:
            found += references(model._default_manager.filter(**{f"{run_field}__in": run_ids}), name)
    return found


def delete_on_commit(found: list[str], using: str) -> None:
    """Inside the transaction that drops these references: delete their files once it commits."""
    if found:
        transaction.on_commit(lambda: offload.delete_files(found), using=using)


def delete_task_files_on_commit(run_ids: list[Any], using: str) -> None:
    """Inside the transaction that deletes or erases these runs: delete their tasks' uploaded files once it commits.

    Only the runs that asked for a form are looked at (one query; a run's files are under its own directory,
    ``task_files.py``): the others have none.
    """
    with_forms = list(
        Approval.objects.filter(workflow_run_id__in=run_ids)
        .exclude(form="")
        .values_list("workflow_run_id", flat=True)
        .distinct()
    )
    if with_forms:
        transaction.on_commit(lambda: task_files.delete_run_directories(with_forms), using=using)


def all_references() -> set[str]:
    """Every reference any row holds (``workflows payload-files``)."""
    found: set[str] = set()
    for model, name, _ in OFFLOADABLE_COLUMNS:
        found.update(references(model._default_manager.all(), name))
    return found


@dataclass(frozen=True)
class StoredFile:
    """A file of the payloads' directory of a storage."""

    reference: str
    modified: datetime | None


def stored_files(alias: str) -> Iterator[StoredFile]:
    """The files under ``offload.FILE_DIRECTORY`` of one storage, walked directory by directory."""
    from django.core.files.storage import storages

    storage = storages[alias]
    pending = [offload.FILE_DIRECTORY]
    while pending:
        directory = pending.pop()
        try:
            directories, files = storage.listdir(directory)
        except FileNotFoundError:
            continue
        pending += [f"{directory}/{name}" for name in directories]
        for name in files:
            path = f"{directory}/{name}"
            try:
                modified: datetime | None = storage.get_modified_time(path)
            except (NotImplementedError, OSError):
                modified = None
            yield StoredFile(f"{offload.REFERENCE_PREFIX}{alias}:{path}", modified)


def orphans(alias: str, now: datetime, older_than: timedelta) -> tuple[list[StoredFile], int]:
    """The files of ``alias`` no row references, modified before ``now - older_than``; and the younger ones'
    count (maybe written by a transaction still open)."""
    referenced = all_references()
    old, young = [], 0
    for file in stored_files(alias):
        if file.reference in referenced:
            continue
        # Undated (a storage without modified times): it may be a transaction's still open, so it is kept.
        if file.modified is None or file.modified > now - older_than:
            young += 1
        else:
            old.append(file)
    return old, young


def delete_files(files: Iterable[StoredFile]) -> int:
    """Delete these files; how many were."""
    found = [file.reference for file in files]
    return len(found) - offload.delete_files(found)
