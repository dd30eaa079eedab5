"""JSON payloads and stored text: encode once, refuse what a supported database cannot store.

Every value a run stores — inputs, outputs, signal data, event payloads,
and the names and keys beside them — passes through here before anything
is written, so a value is refused the same way on SQLite, PostgreSQL and
MariaDB, with an error that names where in the value the problem is:

- a NUL character (PostgreSQL refuses it in text and in jsonb);
- a lone surrogate such as ``"\\ud800"`` (not Unicode text: PostgreSQL and
  MariaDB refuse it; ``json.loads('"\\\\ud800"')`` produces one);
- nesting deeper than :data:`MAX_DEPTH` levels (MariaDB's JSON stops at 31,
  and the journal wraps some payloads in one more level);
- NaN, Infinity, anything JSON cannot hold, or more than
  ``OPENWORKFLOW["MAX_PAYLOAD_BYTES"]`` of encoded JSON.

Text the engine records from user code (an exception's message, a
traceback) is not refused but made storable (:func:`storable_text`).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder

from ..conf import owf_settings
from ..errors import PayloadError, PayloadTooLarge

MAX_DEPTH = 30
"""How many levels of objects and arrays a payload may nest."""


def to_json_value(value: Any, what: str, root: str = "value") -> Any:
    """Return ``value`` as it will read back from the database, or raise :class:`PayloadError`.

    Encoding with Django's JSON encoder (datetimes, decimals and UUIDs become
    strings; tuples become lists) and decoding again means the first execution
    sees exactly what every replay will see. ``what`` names the value in
    errors ("input of workflow 'x'"), ``root`` starts the path to the
    offending part (``input["items"][3]["name"]``) and is the error's
    ``argument``.
    """
    try:
        encoded = json.dumps(value, cls=DjangoJSONEncoder, allow_nan=False, separators=(",", ":"))
        decoded = json.loads(encoded)
    except RecursionError:
        raise PayloadError(f"{what} nests deeper than {MAX_DEPTH} levels, the limit", root) from None
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValueError) and "out of range float" in str(exc).lower():
            raise PayloadError(f"{what} contains NaN or Infinity, which JSON cannot hold", root) from None
        raise PayloadError(
            f"{what} is not JSON-serializable: {exc} (only JSON types, datetimes, decimals and UUIDs can be stored)",
            root,
        ) from None
    # The encoder escapes every non-ASCII character, so text without these
    # escapes holds no NUL and no surrogate: only its depth needs a look.
    texts = "\\u0000" in encoded or "\\ud" in encoded
    problem = _find_problem(decoded, 0, texts)
    if problem is not None:
        path, reason = problem
        raise PayloadError(f"{what}: {root}{''.join(_step(part) for part in path)} {reason}", root)
    limit = owf_settings.max_payload_bytes
    size = len(encoded.encode())
    if size > limit:
        raise PayloadTooLarge(
            f"{what} is {size} bytes of JSON, over the limit of {limit} (OPENWORKFLOW['MAX_PAYLOAD_BYTES'])", root
        )
    return decoded


def check_text(value: str, what: str) -> None:
    """Raise :class:`PayloadError` if a name or key holds a character no supported database stores."""
    reason = _text_problem(value)
    if reason is not None:
        raise PayloadError(f"{what} {json.dumps(value)} {reason}", what)


def storable_text(text: str) -> str:
    """``text`` with NUL characters and lone surrogates written as escapes, so any database stores it."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode()
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode()
    return text


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character (\\x00), which the workflow database cannot store"
    try:
        text.encode()
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone surrogate ('\\u{ord(text[exc.start]):04x}' at character {exc.start}), "
            "which is not valid Unicode text"
        )
    return None


def _find_problem(node: Any, depth: int, texts: bool) -> tuple[list[str | int], str] | None:
    """(path, reason) of the first part of a decoded JSON value that cannot be stored, or None."""
    if isinstance(node, str):
        reason = _text_problem(node) if texts else None
        return ([], reason) if reason is not None else None
    items: Any
    if isinstance(node, dict):
        items = node.items()
    elif isinstance(node, list):
        items = enumerate(node)
    else:
        return None
    if depth >= MAX_DEPTH:
        return [], f"nests deeper than {MAX_DEPTH} levels, the limit"
    for key, child in items:
        if texts and isinstance(key, str):
            reason = _text_problem(key)
            if reason is not None:
                return [key], "is a key that " + reason
        found = _find_problem(child, depth + 1, texts)
        if found is not None:
            found[0].insert(0, key)
            return found
    return None


def _step(part: str | int) -> str:
    # json.dumps escapes control characters, so the path is safe to print.
    return f"[{part}]" if isinstance(part, int) else f"[{json.dumps(part)}]"
