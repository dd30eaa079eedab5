"""Files a person uploads in a human task's form: saved to a Django storage, handed to the run as a reference.

A task's data is JSON, kept in the run's journal, so a file never goes
into it: once the form has validated the submission, each uploaded file
is saved to the storage ``OPENWORKFLOW["TASK_FILES_STORAGE"]`` names (an
alias of ``settings.STORAGES``, ``"default"`` unless set), under the
run's own directory::

    openworkflow/task-files/<run id>/<random hex>/<the file's name>

and the run receives, for that field, a reference (:func:`save`)::

    {"name": "receipt.pdf", "path": "openworkflow/task-files/.../receipt.pdf",
     "storage": "default", "size": 18342, "content_type": "application/pdf"}

Open it with ``storages[ref["storage"]].open(ref["path"])``. The alias is
kept in the reference, as offloaded payloads keep theirs: changing the
setting leaves older files readable where they are.

Nothing is written for a submission the form refuses. A submission that
is written but then not delivered (someone submitted first, the run
ended) deletes its files again (:func:`delete`) before its error goes on.
Retention and erasure delete a run's directory once their transaction has
committed (:func:`delete_run_directories`, ``store/payload_files.py``).
"""

from __future__ import annotations

import base64
import binascii
import logging
import mimetypes
import posixpath
import uuid
from collections.abc import Iterable
from typing import Any

from django.core.files.base import File
from django.core.files.uploadedfile import SimpleUploadedFile

from .conf import owf_settings

logger = logging.getLogger(__name__)

FILE_DIRECTORY = "openworkflow/task-files"
"""Where in the storage task files are written, one directory per run."""
DEFAULT_CONTENT_TYPE = "application/octet-stream"
NAME_LENGTH = 255
"""The longest name a file sent as JSON may have (what most file systems take)."""
JSON_KEYS = frozenset({"name", "content_base64", "content_type"})
"""The keys of a file sent as JSON (the API): ``name`` and ``content_base64`` are required."""


def run_directory(run_id: Any) -> str:
    """The directory of ``run_id``'s files in the storage (retention and erasure find them there)."""
    return f"{FILE_DIRECTORY}/{run_id}"


def is_file(value: Any) -> bool:
    """Whether ``value`` is a file a form's file field takes (an upload, or any Django ``File``)."""
    return isinstance(value, File)


def from_json(value: Any) -> File[Any]:
    """The file a JSON object ``{"name", "content_base64", "content_type"?}`` describes.

    Raises :class:`ValueError` with a message for the person (it becomes the
    field's error): not an object, unknown or missing keys, not base64.
    """
    if not isinstance(value, dict):
        raise ValueError('Send a file as an object {"name": ..., "content_base64": ...}.')
    unknown = sorted(set(value) - JSON_KEYS)
    if unknown:
        raise ValueError(f"Unknown key {unknown[0]!r:.40} in a file; its keys are name, content_base64, content_type.")
    name, content, kind = value.get("name"), value.get("content_base64"), value.get("content_type")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("A file needs its name, as text.")
    if len(name) > NAME_LENGTH or "\x00" in name:
        raise ValueError(f"A file's name must be at most {NAME_LENGTH} characters, without NUL.")
    if not isinstance(content, str):
        raise ValueError("A file needs its content_base64, as text.")
    if kind is not None and (not isinstance(kind, str) or len(kind) > NAME_LENGTH or "/" not in kind):
        raise ValueError("A file's content_type must be a media type such as 'application/pdf'.")
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("The file's content_base64 is not base64.") from None
    return SimpleUploadedFile(posixpath.basename(name.replace("\\", "/")) or "file", data, kind or _guessed(name))


def too_large(upload: File[Any]) -> str | None:
    """Why ``upload`` is larger than ``TASK_FILE_MAX_BYTES`` allows, or None."""
    limit = owf_settings.task_file_max_bytes
    size = upload.size
    if limit is not None and size is not None and size > limit:
        return f"The file is {size} bytes; the most a task takes is {limit}."
    return None


def save(run_id: Any, upload: File[Any]) -> dict[str, Any]:
    """Save ``upload`` under ``run_id``'s directory; the reference the run receives for it."""
    from django.core.files.storage import storages

    alias = owf_settings.task_files_storage
    # storages[alias] is one object shared by every thread of the process: Django's storages keep no state
    # between calls (FileSystemStorage), or keep their connections per thread (django-storages' S3Storage).
    storage = storages[alias]
    original = posixpath.basename((upload.name or "").replace("\\", "/")) or "file"
    stored_name = storage.get_valid_name(original) or "file"
    path = storage.save(f"{run_directory(run_id)}/{uuid.uuid4().hex}/{stored_name}", upload)
    kind = getattr(upload, "content_type", None) or _guessed(original)
    return {"name": original, "path": path, "storage": alias, "size": upload.size, "content_type": kind}


def delete(references: Iterable[dict[str, Any]]) -> None:
    """Delete saved files that no run received; a storage's error is logged, the others still deleted."""
    from django.core.files.storage import storages

    for reference in references:
        try:
            storages[reference["storage"]].delete(reference["path"])
        except Exception:  # any storage's own error: the submission's own error is the one to raise
            logger.exception("could not delete the task file %s of storage %s", reference["path"], reference["storage"])


def delete_run_directories(run_ids: list[Any]) -> int:
    """Delete every file under these runs' directories of the storage ``TASK_FILES_STORAGE`` names now; how many
    could not be.

    Called once the transaction that deleted (or erased) the runs has committed, so an error here cannot undo
    it: it is logged and the other files are still deleted. A file in a storage the setting named before stays.
    """
    from django.core.files.storage import storages

    failed = 0
    try:
        alias = owf_settings.task_files_storage
        storage = storages[alias]
    except Exception:  # a setting made bad since (check E052 says so): the rows are gone already
        logger.exception("could not delete the task files of %d runs", len(run_ids))
        return 1
    for run_id in run_ids:
        pending = [run_directory(run_id)]
        while pending:
            directory = pending.pop()
            try:
                directories, files = storage.listdir(directory)
            except FileNotFoundError:  # the run's tasks took no file
                continue
            except Exception:
                failed += 1
                logger.exception("could not list the task files under %s of storage %s", directory, alias)
                continue
            pending += [f"{directory}/{name}" for name in directories]
            for name in files:
                try:
                    storage.delete(f"{directory}/{name}")
                except Exception:
                    failed += 1
                    logger.exception("could not delete the task file %s/%s of storage %s", directory, name, alias)
    return failed


def _guessed(name: str) -> str:
    return mimetypes.guess_type(name)[0] or DEFAULT_CONTENT_TYPE
