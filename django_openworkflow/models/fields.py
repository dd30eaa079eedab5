"""The payload columns' fields: JSON and text stored encrypted when ``OPENWORKFLOW["PAYLOAD_ENCRYPTION"]`` is set.

Each is Django's own field with two hooks more: ``get_db_prep_save`` seals
the value on its way to the database (every INSERT and UPDATE, the ORM's and
the store's own statements alike, prepares its values with it), and
``from_db_value`` opens a sealed value on its way back (every read that
loads the column, ``values_list`` and the store's own cursors included).
Lookups do not go through ``get_db_prep_save``: a filter on a key of an
error (``error__type``) compares the clear part as before.

With encryption off, a save costs one settings read and a read one type
check (``encryption.is_sealed``), so plain values stay as cheap as before;
sealed values are still opened (or read as ``Undecryptable`` when no key
is configured). The fields deconstruct as Django's own: switching to them
needs no migration, and the stored form is an ordinary JSON string or text.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .. import offload
from ..encryption import (
    PREFIX,
    Undecryptable,
    keyring,
    reading_keyring,
    refuse_to_store,
    seal_error,
    seal_text,
    unseal_error,
    unseal_text,
)

# What a stored JSON string starts with when it is not a plain value: encrypted, compressed or offloaded.
_STORED_PREFIXES = (PREFIX, offload.COMPRESSED_PREFIX, offload.REFERENCE_PREFIX)


class PayloadField(models.JSONField):
    """A JSON payload column (an input, an output, a step result, a message's data): compressed, sealed whole
    and offloaded to a storage as the settings say (``offload.to_stored``)."""

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        if value is not None and not hasattr(value, "as_sql"):
            value = offload.to_stored(value, self.encoder, keyring())
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        loaded = super().from_db_value(value, expression, connection)
        if loaded.__class__ is str and loaded.startswith(_STORED_PREFIXES):
            return offload.from_stored(loaded)
        return loaded


class ErrorField(models.JSONField):
    """An error dict: its ``message`` and ``traceback`` (and its child error's) sealed, unless ``ENCRYPT_ERRORS``
    is False; its ``type``, ``step`` and retry note stay in clear, for the filters and the engine's rules."""

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        ring = keyring()
        if ring is not None and value.__class__ is dict:
            value = seal_error(value, ring)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        loaded = super().from_db_value(value, expression, connection)
        if loaded.__class__ is dict and value.__class__ is str and PREFIX in value:
            return unseal_error(loaded, reading_keyring())
        return loaded


class PayloadTextField(models.TextField):
    """A text column people write (an approval's details, a decision's comment), sealed when not empty."""

    def deconstruct(self) -> Any:
        name, _, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        ring = keyring()
        if ring is None:
            if value.__class__ is Undecryptable:
                refuse_to_store(value)
        elif value.__class__ is str and value:
            value = seal_text(value, ring)
        return super().get_db_prep_save(value, connection)

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if value.__class__ is str and value.startswith(PREFIX):
            return unseal_text(value, reading_keyring())
        return value
