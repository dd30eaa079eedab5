"""Payload encryption at rest (``OPENWORKFLOW["PAYLOAD_ENCRYPTION"]``): the keys, the stored form, the codecs.

Opt-in. With a list of keys set, the payload columns (runs' inputs and
outputs, step results, signals' and events' data, published values, stream
chunks, approvals' details and comments, and the message and traceback of
every error unless ``ENCRYPT_ERRORS`` is False) are written encrypted with
the first key; every key of the list decrypts. The model fields of
``models/fields.py`` call :func:`seal` and :func:`unseal` as they save and
load a value, so every write and read of the ORM (and of the store's own SQL,
which goes through the same fields) is covered.

A stored encrypted value is a JSON string (so it fits every JSON column):
``"owfenc:1:<key id>:<Fernet token>"``. The key id, the first 8 hex digits
of the key's SHA-256, says which key sealed it: decrypting takes that key
directly (no trial of every key), and ``workflows rotate-keys`` tells the
values still under an older key without decrypting them. Plain values
(written before encryption was turned on) stay readable as they are: a value
is decrypted only when it has that form.

A value no configured key opens is read as :class:`Undecryptable`, a
``str`` whose text says so: every page, answer and command shows that text
instead of failing, storing it again is refused, and a worker fails the run
whose input or step results are undecryptable
instead of running its code on them (``engine/context.py``).

``cryptography`` (the ``encryption`` extra) is imported only when keys are
set: a project without them never imports it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.serializers.json import DjangoJSONEncoder
from django.core.signals import setting_changed
from django.dispatch import receiver

if TYPE_CHECKING:
    from cryptography.fernet import Fernet

SETTING = "PAYLOAD_ENCRYPTION"
"""The ``OPENWORKFLOW`` key that holds the keys."""
ERRORS_SETTING = "ENCRYPT_ERRORS"
"""The ``OPENWORKFLOW`` key that says whether errors' messages and tracebacks are encrypted (default True)."""

PREFIX = "owfenc:1:"
"""How every encrypted value starts: the format (version 1), then the key id, ``:`` and the Fernet token."""
KEY_ID_LENGTH = 8
UNDECRYPTABLE_TEXT = "<cannot be decrypted with the configured keys>"

ERROR_TEXT_KEYS = ("message", "traceback")
"""The keys of an error dict that are encrypted; ``type``, ``step`` and the retry note stay in clear."""
NESTED_ERROR_KEYS = ("child_error",)
"""Keys of an error dict that hold an error of their own (a child run's), encrypted the same way."""


class Undecryptable(str):
    """A stored value that no configured key opens; its text is :data:`UNDECRYPTABLE_TEXT`.

    ``key_id`` names the key that sealed it (``""`` when the value was damaged).
    """

    key_id: str

    def __new__(cls, key_id: str = "") -> Undecryptable:
        value = super().__new__(cls, UNDECRYPTABLE_TEXT)
        value.key_id = key_id
        return value

    def __reduce__(self) -> Any:
        return (Undecryptable, (self.key_id,))


class MissingFile(str):
    """An offloaded value (``offload.py``) whose file the storage does not have; its text says so.

    ``reference`` is the value's stored reference (``owfref:1:<storage alias>:<file name>``). Shown, refused
    and failed like :class:`Undecryptable`.
    """

    reference: str

    def __new__(cls, reference: str = "") -> MissingFile:
        alias, _, name = reference.removeprefix("owfref:1:").partition(":")
        value = super().__new__(cls, f"<the payload's file {name} is missing from the storage {alias!r}>")
        value.reference = reference
        return value

    def __reduce__(self) -> Any:
        return (MissingFile, (self.reference,))


def is_undecryptable(value: Any) -> bool:
    """Whether ``value`` is a value no configured key opens."""
    return value.__class__ is Undecryptable


def is_unreadable(value: Any) -> bool:
    """Whether ``value`` stands for a stored value that cannot be read: no key opens it, or its file is missing."""
    return value.__class__ is Undecryptable or value.__class__ is MissingFile


def refuse_to_store(value: Any) -> None:
    """Raise :class:`~django_openworkflow.errors.PayloadError` (a ``ValueError``) for an :class:`Undecryptable`.

    Its text is not the value: storing it (a re-run's input, a copied result) would lose the value for good.
    """
    if value.__class__ is Undecryptable:
        from .errors import PayloadError

        raise PayloadError(
            "a value that cannot be decrypted with the configured keys cannot be stored again: "
            "add its key to OPENWORKFLOW['PAYLOAD_ENCRYPTION'] first"
        )
    if value.__class__ is MissingFile:
        from .errors import PayloadError

        raise PayloadError(
            f"a value whose file is missing cannot be stored again: {value} (restore the file to the storage first)"
        )


class EncryptionNotAvailable(Exception):
    """``PAYLOAD_ENCRYPTION`` is set but cannot be used: ``cryptography`` is missing or a key is malformed."""


def key_id(key: str | bytes) -> str:
    """The short id of a key, as encrypted values name it: the first 8 hex digits of its SHA-256."""
    raw = key.encode() if isinstance(key, str) else bytes(key)
    return hashlib.sha256(raw.strip()).hexdigest()[:KEY_ID_LENGTH]


@dataclass(frozen=True)
class Keyring:
    """The configured keys: the first seals, each opens what it sealed."""

    current_id: str
    ids: tuple[str, ...]
    _fernets: dict[str, Fernet]
    encrypt_errors: bool = True

    def seal_text(self, text: str) -> str:
        """``text`` encrypted with the first key, in the stored form (``owfenc:1:<id>:<token>``)."""
        token = self._fernets[self.current_id].encrypt(text.encode("utf-8"))
        return f"{PREFIX}{self.current_id}:{token.decode('ascii')}"

    def open_text(self, stored: str) -> str | Undecryptable:
        """The text a stored form holds, or :class:`Undecryptable` when no configured key opens it."""
        from cryptography.fernet import InvalidToken

        kid, _, token = stored[len(PREFIX) :].partition(":")
        fernet = self._fernets.get(kid)
        if fernet is None:
            return Undecryptable(kid)
        try:
            return fernet.decrypt(token.encode("ascii")).decode("utf-8")
        except (InvalidToken, UnicodeError, ValueError):
            return Undecryptable(kid)


_UNREAD: Any = object()
# The Keyring of the settings in force, None when encryption is off, or _UNREAD: replaced whole, read
# without a lock (a race only builds it twice). Read once, forgotten when OPENWORKFLOW changes
# (override_settings, the settings fixture): the hot path of every payload costs one global read.
_current: Any = _UNREAD


@receiver(setting_changed)
def _forget_keys(setting: str, **kwargs: Any) -> None:
    global _current
    if setting == "OPENWORKFLOW":
        _current = _UNREAD


def parse_keys(keys: Any) -> list[str]:
    """The keys of the setting as strings, checked; raises :class:`EncryptionNotAvailable` naming the problem."""
    if isinstance(keys, str | bytes) or not isinstance(keys, list | tuple):
        raise EncryptionNotAvailable(
            f"OPENWORKFLOW[{SETTING!r}] must be a list of Fernet keys (the first encrypts, every one decrypts), "
            f"got a {type(keys).__name__}"
        )
    if not keys:
        raise EncryptionNotAvailable(f"OPENWORKFLOW[{SETTING!r}] is an empty list: give at least one key, or None")
    try:
        from cryptography.fernet import Fernet
    except ImportError:
        raise EncryptionNotAvailable(
            f"OPENWORKFLOW[{SETTING!r}] is set but the cryptography package is not installed: "
            "pip install 'django-openworkflow[encryption]'"
        ) from None
    texts = []
    for position, key in enumerate(keys):
        text = key.decode("ascii", "replace") if isinstance(key, bytes) else key
        if not isinstance(text, str):
            raise EncryptionNotAvailable(
                f"OPENWORKFLOW[{SETTING!r}][{position}] is a {type(key).__name__}, not a key (a string)"
            )
        try:
            Fernet(text.strip())
        except (ValueError, TypeError):
            raise EncryptionNotAvailable(
                f"OPENWORKFLOW[{SETTING!r}][{position}] is not a Fernet key (32 url-safe base64-encoded bytes; "
                "make one with `python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key()"
                ".decode())'`)"
            ) from None
        texts.append(text.strip())
    ids = [key_id(text) for text in texts]
    if len(set(ids)) != len(ids):
        raise EncryptionNotAvailable(f"OPENWORKFLOW[{SETTING!r}] lists the same key twice")
    return texts


def keyring() -> Keyring | None:
    """The configured :class:`Keyring`, or None when encryption is off.

    Built once per value of the setting. Raises :class:`EncryptionNotAvailable`
    when the setting cannot be used (the system check ``openworkflow.E050``
    says so at start-up).
    """
    ring = _current
    return _load() if ring is _UNREAD else ring


def _load() -> Keyring | None:
    global _current
    user = getattr(django_settings, "OPENWORKFLOW", None) or {}
    keys = user.get(SETTING)
    ring = None
    if keys:
        texts = parse_keys(keys)  # imports cryptography, or says it is missing
        from cryptography.fernet import Fernet

        fernets = {key_id(text): Fernet(text) for text in texts}
        ring = Keyring(key_id(texts[0]), tuple(fernets), fernets, bool(user.get(ERRORS_SETTING, True)))
    _current = ring
    return ring


def is_on() -> bool:
    """Whether payloads are written encrypted now."""
    return keyring() is not None


# -- the codecs of the model fields: a value as stored, and a stored value as read --


def is_sealed(value: Any) -> bool:
    """Whether a stored JSON value (or text) is in the encrypted form."""
    return value.__class__ is str and value.startswith(PREFIX)


def seal(value: Any, ring: Keyring, encoder: type[json.JSONEncoder] | None = DjangoJSONEncoder) -> str:
    """A JSON value encrypted whole: its JSON text (as the JSON field would store it), sealed."""
    refuse_to_store(value)
    return ring.seal_text(json.dumps(value, cls=encoder))


def unseal(stored: str, ring: Keyring | None) -> Any:
    """The JSON value a sealed string holds, or :class:`Undecryptable`."""
    if ring is None:
        return Undecryptable(stored_key_id(stored))
    text = ring.open_text(stored)
    if text.__class__ is Undecryptable:
        return text
    return json.loads(text)


def seal_text(value: str, ring: Keyring) -> str:
    """A text column's value sealed (the text itself, not its JSON)."""
    refuse_to_store(value)
    return ring.seal_text(value)


def unseal_text(stored: str, ring: Keyring | None) -> str:
    """The text a sealed text column's value holds, or :class:`Undecryptable`."""
    return Undecryptable(stored_key_id(stored)) if ring is None else ring.open_text(stored)


def seal_error(error: Any, ring: Keyring) -> Any:
    """An error dict with its message and traceback (and its child error's) sealed; the rest in clear.

    Only when ``ENCRYPT_ERRORS`` is on; anything but a dict is stored as it is.
    """
    if not ring.encrypt_errors or error.__class__ is not dict:
        return error
    sealed = dict(error)
    for key in ERROR_TEXT_KEYS:
        text = sealed.get(key)
        if text.__class__ is str and not text.startswith(PREFIX):
            sealed[key] = ring.seal_text(text)
        elif text.__class__ is Undecryptable:  # copied from an error this process cannot read: its text says so
            sealed[key] = ring.seal_text(str.__str__(text))
    for key in NESTED_ERROR_KEYS:
        nested = sealed.get(key)
        if nested.__class__ is dict:
            sealed[key] = seal_error(nested, ring)
    return sealed


def unseal_error(error: Any, ring: Keyring | None) -> Any:
    """An error dict as read: its sealed texts opened (or :class:`Undecryptable`), in place."""
    if error.__class__ is not dict:
        return error
    for key in ERROR_TEXT_KEYS:
        text = error.get(key)
        if text.__class__ is str and text.startswith(PREFIX):
            error[key] = unseal_text(text, ring)
    for key in NESTED_ERROR_KEYS:
        nested = error.get(key)
        if nested.__class__ is dict:
            unseal_error(nested, ring)
    return error


def reading_keyring() -> Keyring | None:
    """:func:`keyring` for a read: a setting that cannot be used opens nothing, and fails no page."""
    try:
        return keyring()
    except EncryptionNotAvailable:
        return None


def open_text_value(value: Any) -> Any:
    """A text read outside the fields (a JSON key read in SQL, such as an error's message): opened if sealed."""
    if value.__class__ is str and value.startswith(PREFIX):
        return unseal_text(value, reading_keyring())
    return value


def stored_key_id(stored: str) -> str:
    """The id of the key that sealed a sealed string."""
    return stored[len(PREFIX) :].partition(":")[0]


def stored_key_ids(value: Any) -> set[str]:
    """The ids of the keys that sealed a stored value (a sealed string, or an error dict holding some)."""
    if value.__class__ is str:
        return {stored_key_id(value)} if value.startswith(PREFIX) else set()
    found: set[str] = set()
    if value.__class__ is dict:
        for key in ERROR_TEXT_KEYS:
            found |= stored_key_ids(value.get(key))
        for key in NESTED_ERROR_KEYS:
            found |= stored_key_ids(value.get(key))
    return found


def unreadable_payload(run_input: Any, completed: dict[str, Any]) -> tuple[str, str] | None:
    """What a worker cannot read of a run it claimed (its input, or a completed step's result): the error type
    and the message the engine fails the run with; or None.

    ``completed`` maps step keys to their journal records (``output``). The
    type is ``PayloadUndecryptable`` (no configured key opens the value) or
    ``PayloadFileMissing`` (an offloaded value's file is gone, ``offload.py``).
    """
    found: tuple[str, Any] | None = None
    if is_unreadable(run_input):
        found = ("the run's input", run_input)
    else:
        for key, attempt in completed.items():
            if is_unreadable(attempt.output):
                found = (f"the result of step {key!r}", attempt.output)
                break
    if found is None:
        return None
    what, value = found
    if value.__class__ is MissingFile:
        return "PayloadFileMissing", (
            f"{what} is stored in a file the storage does not have ({value.reference.removeprefix('owfref:1:')}): "
            "the run is failed instead of running on a value it cannot read; restore the file, then retry the run"
        )
    sealed_by = f" (encrypted with the key of id {value.key_id})" if value.key_id else ""
    return "PayloadUndecryptable", (
        f"{what} cannot be decrypted with the keys of OPENWORKFLOW['PAYLOAD_ENCRYPTION']{sealed_by}: "
        "the run is failed instead of running on a value it cannot read; add the key to the setting, "
        "then retry the run"
    )


def refuse_input_search() -> None:
    """Raise when runs' inputs are stored encrypted: a search by their content cannot be answered.

    Raised as the :class:`~django_openworkflow.errors.InvalidArgument` of the ``input`` argument, which
    the admin, the API and the command line show as such.
    """
    from .errors import InvalidArgument

    if is_on():
        raise InvalidArgument(
            "a search by input is not available: OPENWORKFLOW['PAYLOAD_ENCRYPTION'] stores runs' inputs "
            "encrypted, and the database cannot look inside them. Search by a typed attribute "
            "(@workflow(attributes=...), ctx.set_attribute) or by subject instead: they stay in clear and indexed",
            "input_contains",
        )


def fernet_key() -> str:
    """A new random key for ``PAYLOAD_ENCRYPTION`` (needs ``cryptography``)."""
    from cryptography.fernet import Fernet

    return Fernet.generate_key().decode("ascii")
