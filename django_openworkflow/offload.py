"""Large payloads: compressed above one size, written to a Django storage above another.

Both opt-in (``OPENWORKFLOW["PAYLOAD_COMPRESSION"]`` and
``OPENWORKFLOW["PAYLOAD_OFFLOAD"]``), and both applied where encryption is:
in the stored form the payload fields (``models/fields.py``) write and read,
so every JSON payload column (runs' inputs and outputs, step results,
signals' and events' data, published values, stream chunks, tasks' initial
data) gets them. A value on its way to the database goes through::

    serialize (JSON text) -> compress (above PAYLOAD_COMPRESSION) -> encrypt (PAYLOAD_ENCRYPTION)
                          -> offload (above PAYLOAD_OFFLOAD["THRESHOLD"])

and back the other way on its way out. Each step leaves a marker at the
start of a JSON string, so plain, compressed, encrypted and offloaded values
live side by side in one column and turning any of them on or off needs no
migration and no downtime:

- ``"owfz:1:<base64 of zlib>"``: the value's JSON text, compressed (zlib, the
  standard library). Inside an encrypted value it is the text encrypted.
- ``"owfenc:1:<key id>:<token>"``: encrypted (``encryption.py``).
- ``"owfref:1:<storage alias>:<file name>"``: offloaded. The file holds the
  stored form the column would have held (so with encryption on, the file is
  encrypted too), as JSON text. The alias is kept in the reference: changing
  the setting's storage leaves older files readable where they are.

A file that is missing when its value is read is read as :class:`~.encryption.MissingFile`,
which every page, answer and command shows instead of failing, like a value
no key opens. Retention and erasure delete a run's files once their own
transaction has committed (``store/payload_files.py``); ``workflows
payload-files`` lists (and deletes) the files no row references.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.files.base import ContentFile
from django.core.signals import setting_changed
from django.dispatch import receiver

from . import encryption

logger = logging.getLogger(__name__)

COMPRESSION_SETTING = "PAYLOAD_COMPRESSION"
"""The ``OPENWORKFLOW`` key: the size (bytes of JSON text) from which a payload is compressed, or None."""
OFFLOAD_SETTING = "PAYLOAD_OFFLOAD"
"""The ``OPENWORKFLOW`` key: ``{"STORAGE": <STORAGES alias>, "THRESHOLD": <bytes>}``, or None."""
DEFAULT_OFFLOAD_THRESHOLD = 256 * 1024

COMPRESSED_PREFIX = "owfz:1:"
REFERENCE_PREFIX = "owfref:1:"
FILE_DIRECTORY = "openworkflow/payloads"
"""Where in the storage payload files are written; ``workflows payload-files`` looks only there."""
COMPRESSION_LEVEL = 6  # zlib's default: most of the gain of 9 at a fraction of its time


class OffloadSettingError(ValueError):
    """``PAYLOAD_COMPRESSION`` or ``PAYLOAD_OFFLOAD`` cannot be used; the message says what to change."""


@dataclass(frozen=True)
class Policy:
    """The settings in force: compress from ``compress_from`` bytes, offload to ``storage`` from ``offload_from``."""

    compress_from: int | None
    storage: str | None  # the STORAGES alias; set while files are managed, even when THRESHOLD is None
    offload_from: int | None

    @property
    def active(self) -> bool:
        return self.compress_from is not None or self.offload_from is not None


def _size(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OffloadSettingError(f"{where} must be a size in bytes (a whole number of at least 1) or None, "
                                  f"got {value!r:.60}")  # fmt: skip
    return value


def parse(user: dict[str, Any]) -> Policy:
    """The policy ``OPENWORKFLOW`` sets, checked; raises :class:`OffloadSettingError` naming the problem."""
    compress_from = _size(user.get(COMPRESSION_SETTING), f"OPENWORKFLOW[{COMPRESSION_SETTING!r}]")
    offload = user.get(OFFLOAD_SETTING)
    if offload is None:
        return Policy(compress_from, None, None)
    where = f"OPENWORKFLOW[{OFFLOAD_SETTING!r}]"
    if not isinstance(offload, dict) or not set(offload) <= {"STORAGE", "THRESHOLD"}:
        raise OffloadSettingError(
            f'{where} must be None or a dict with the keys "STORAGE" (an alias of STORAGES) and "THRESHOLD" '
            f'(bytes), such as {{"STORAGE": "default", "THRESHOLD": 262144}}, got {offload!r:.80}'
        )
    storage = offload.get("STORAGE", "default")
    if not isinstance(storage, str) or not storage or ":" in storage:
        raise OffloadSettingError(f"{where}['STORAGE'] must be an alias of settings.STORAGES, got {storage!r:.60}")
    storages = getattr(django_settings, "STORAGES", {}) or {}
    if storage not in storages:
        raise OffloadSettingError(
            f"{where}['STORAGE'] is {storage!r}, which settings.STORAGES does not define "
            f"(it defines {', '.join(sorted(storages)) or 'nothing'}): add it, or name one of those"
        )
    threshold = _size(offload.get("THRESHOLD", DEFAULT_OFFLOAD_THRESHOLD), f"{where}['THRESHOLD']")
    return Policy(compress_from, storage, threshold)


_UNREAD: Any = object()
# The Policy of the settings in force, or _UNREAD: replaced whole, read without a lock (a race only builds it
# twice), forgotten when OPENWORKFLOW changes, as encryption.py's keyring.
_current: Any = _UNREAD


@receiver(setting_changed)
def _forget_policy(setting: str, **kwargs: Any) -> None:
    global _current
    if setting in ("OPENWORKFLOW", "STORAGES"):
        _current = _UNREAD


def policy() -> Policy:
    """The settings in force; raises :class:`OffloadSettingError` (the checks E052-E054 say so at start-up)."""
    global _current
    found = _current
    if found is _UNREAD:
        found = _current = parse(getattr(django_settings, "OPENWORKFLOW", None) or {})
    return found


# -- the stored form --


def to_stored(value: Any, encoder: type[json.JSONEncoder] | None, ring: encryption.Keyring | None) -> Any:
    """The JSON value a payload column stores for ``value``: see the module's docstring for the steps."""
    encryption.refuse_to_store(value)
    rules = policy()
    if ring is None and not rules.active:
        return value
    text = json.dumps(value, cls=encoder)  # ASCII: its length is its size in bytes
    stored: Any = value
    if rules.compress_from is not None and len(text) >= rules.compress_from:
        packed = base64.b64encode(zlib.compress(text.encode("ascii"), COMPRESSION_LEVEL)).decode("ascii")
        text = stored = f"{COMPRESSED_PREFIX}{packed}"
    if ring is not None:
        text = stored = ring.seal_text(text)
    if rules.offload_from is not None and rules.storage is not None:
        file_text = text if stored is value else json.dumps(stored)
        if len(file_text) >= rules.offload_from:
            return write_file(rules.storage, file_text)
    return stored


def write_file(alias: str, file_text: str) -> str:
    """Write a stored form to a new file of the storage; the reference the column keeps."""
    from django.core.files.storage import storages

    # storages[alias] is one object shared by every thread of the process: Django's storages keep no state
    # between calls (FileSystemStorage), or keep their connections per thread (django-storages' S3Storage).
    name = storages[alias].save(f"{FILE_DIRECTORY}/{uuid.uuid4().hex}.json", ContentFile(file_text.encode("ascii")))
    return f"{REFERENCE_PREFIX}{alias}:{name}"


def is_reference(value: Any) -> bool:
    """Whether a stored JSON value is an offloaded value's reference."""
    return value.__class__ is str and value.startswith(REFERENCE_PREFIX)


def parse_reference(reference: str) -> tuple[str, str]:
    """(storage alias, file name) of a reference."""
    alias, _, name = reference[len(REFERENCE_PREFIX) :].partition(":")
    return alias, name


def read_file_text(reference: str) -> str | None:
    """The stored form an offloaded value's file holds (JSON text), or None when the file cannot be read."""
    from django.core.files.storage import storages
    from django.core.files.storage.handler import InvalidStorageError

    alias, name = parse_reference(reference)
    try:
        with storages[alias].open(name, "rb") as file:
            return bytes(file.read()).decode("ascii")
    except (OSError, InvalidStorageError, UnicodeError):  # S3's missing key is an OSError too (FileNotFoundError)
        return None


def from_stored(loaded: Any) -> Any:
    """The value a stored JSON value holds; :class:`~.encryption.Undecryptable` or :class:`~.encryption.MissingFile`
    when it cannot be read."""
    if loaded.__class__ is not str:
        return loaded
    if loaded.startswith(REFERENCE_PREFIX):
        file_text = read_file_text(loaded)
        if file_text is None:
            return encryption.MissingFile(loaded)
        try:
            loaded = json.loads(file_text)
        except ValueError:
            return encryption.Undecryptable()
        if loaded.__class__ is not str:
            return loaded
    if loaded.startswith(encryption.PREFIX):
        ring = encryption.reading_keyring()
        if ring is None:
            return encryption.Undecryptable(encryption.stored_key_id(loaded))
        text = ring.open_text(loaded)
        return text if text.__class__ is encryption.Undecryptable else _from_text(text)
    if loaded.startswith(COMPRESSED_PREFIX):
        return _from_text(loaded)
    return loaded


def _from_text(text: str) -> Any:
    """A value from its JSON text, compressed or not."""
    try:
        if text.startswith(COMPRESSED_PREFIX):
            text = zlib.decompress(base64.b64decode(text[len(COMPRESSED_PREFIX) :], validate=True)).decode("ascii")
        return json.loads(text)
    except (ValueError, zlib.error, binascii.Error):
        return encryption.Undecryptable()


def delete_files(references: list[str]) -> int:
    """Delete offloaded values' files; how many could not be. A file already gone is no error (a second
    prune, a retried erasure).

    Called after the rows' transaction has committed (``on_commit``), so an error here
    cannot undo it: a storage that fails, or an alias since removed from ``STORAGES``,
    is logged for each file and the others are still deleted. ``workflows payload-files``
    lists what is left.
    """
    from django.core.files.storage import storages

    failed = 0
    for reference in references:
        alias, name = parse_reference(reference)
        try:
            storages[alias].delete(name)
        except Exception:  # any storage's own error (S3, a removed alias): the rows are gone already
            failed += 1
            logger.exception(
                "could not delete the payload file %s; `manage.py workflows payload-files --storage %s` lists it",
                reference,
                alias,
            )
    return failed
