"""Typed run attributes: what ``@workflow(attributes=...)`` declares, and the values checked against it.

A workflow declares its attributes by name and Python type::

    @workflow(attributes={"customer_id": int, "region": str, "amount": Decimal, "due": datetime})

A run gets values at its start (``run(..., attributes={...})``) or while it
works (``ctx.set_attribute(name, value)``). Each type is stored in a column of
its own (``store/attributes.py``), so it is indexed, compared and ordered as
that type on every database: 9 < 10, ``Decimal("9.5") < Decimal("10.25")``,
datetimes by the instant they name, whatever their time zone.

No database here: the checks run where the declaration and the values are made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from ..errors import InvalidArgument

__all__ = [
    "ATTRIBUTE_TYPES",
    "DECIMAL_PLACES",
    "LOOKUPS",
    "MAX_DIGITS",
    "MAX_TEXT_LENGTH",
    "AttributeCondition",
    "check_declaration",
    "check_value",
    "parse_value",
]

ATTRIBUTE_TYPES: dict[type, str] = {int: "int", str: "str", Decimal: "decimal", datetime: "datetime"}
"""The types an attribute may have, and the name each is known by (the column holding it: ``<name>_value``)."""

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,62}")
"""A lowercase identifier of at most 63 characters: it is written in query strings (``?attr.region=eu``)."""

MAX_TEXT_LENGTH = 255
"""The longest ``str`` value (the column's length)."""

MAX_DIGITS = 15
DECIMAL_PLACES = 6
"""A ``Decimal`` value has at most 15 digits, 6 of them after the point: SQLite compares exactly up to 15."""

INT_RANGE = (-(2**63), 2**63 - 1)
"""An ``int`` value fits a 64-bit column."""

LOOKUPS = ("eq", "gt", "gte", "lt", "lte", "in")
"""What a filter may ask of an attribute: ``amount__gte``; a bare name means ``eq``."""


def check_declaration(attributes: Any, where: str) -> dict[str, type]:
    """The declared ``{name: type}``; ValueError naming a bad name or an unsupported type."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):
        raise ValueError(f"{where}: attributes must be a dict of name to type, got {attributes!r:.80}")
    declared: dict[str, type] = {}
    for name, kind in attributes.items():
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or "__" in name:
            raise ValueError(
                f"{where}: attribute name {name!r:.80} is not allowed: use a lowercase identifier of at most "
                "63 characters (letters, digits and single underscores, starting with a letter)"
            )
        if kind not in ATTRIBUTE_TYPES:
            supported = ", ".join(kind.__name__ for kind in ATTRIBUTE_TYPES)
            raise ValueError(f"{where}: attribute {name!r} has type {kind!r:.80}; the supported types are {supported}")
        declared[name] = kind
    return declared


def type_name(kind: type) -> str:
    """``int``, ``str``, ``Decimal`` or ``datetime``: a type as error messages name it."""
    return kind.__name__


def _declared_names(declared: Mapping[str, type]) -> str:
    if not declared:
        return "it declares none (@workflow(attributes={...}))"
    return "declared: " + ", ".join(f"{name} ({type_name(kind)})" for name, kind in sorted(declared.items()))


def declared_type(declared: Mapping[str, type], name: Any, where: str, argument: str = "attributes") -> type:
    """The type ``name`` is declared with; InvalidArgument listing the declared names for an unknown one."""
    kind = declared.get(name) if isinstance(name, str) else None
    if kind is None:
        raise InvalidArgument(f"{where}: unknown attribute {name!r:.80}; {_declared_names(declared)}", argument)
    return kind


def check_value(kind: type, value: Any, name: str, where: str, argument: str = "attributes") -> Any:
    """``value`` as attribute ``name`` of type ``kind`` stores it; InvalidArgument saying what was expected."""

    def refuse(why: str) -> InvalidArgument:
        got = f"{type(value).__name__} {value!r:.80}"
        return InvalidArgument(f"{where}: attribute {name!r} expects {type_name(kind)}{why}, got {got}", argument)

    if kind is int:
        if type(value) is not int:  # bool is an int to Python, not to a filter
            raise refuse("")
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise refuse(" (a 64-bit integer)")
        return value
    if kind is str:
        if not isinstance(value, str):
            raise refuse("")
        if len(value) > MAX_TEXT_LENGTH or "\x00" in value:
            raise refuse(f" (at most {MAX_TEXT_LENGTH} characters, no NUL)")
        return value
    if kind is Decimal:
        if type(value) is int:
            value = Decimal(value)
        if not isinstance(value, Decimal) or not value.is_finite():
            raise refuse(" (a finite Decimal; an int is taken too, a float is not)")
        exponent = value.as_tuple().exponent
        assert isinstance(exponent, int)  # finite
        places = max(0, -exponent)
        digits = len(value.as_tuple().digits)
        whole = digits - places if exponent < 0 else digits + exponent
        if places > DECIMAL_PLACES or max(whole, 1) > MAX_DIGITS - DECIMAL_PLACES:
            raise refuse(
                f" with at most {MAX_DIGITS - DECIMAL_PLACES} digits before the point and {DECIMAL_PLACES} after"
            )
        return value
    if not isinstance(value, datetime):
        raise refuse(" (an aware datetime)")
    if value.tzinfo is None or value.utcoffset() is None:
        raise refuse(" (an aware datetime: give it a time zone)")
    return value.astimezone(UTC)


def parse_value(kind: type, text: str, name: str, where: str, argument: str = "attributes") -> Any:
    """A value of type ``kind`` from text (a query string's, the command line's); InvalidArgument when it is not one."""
    value: Any = text
    try:
        if kind is int:
            value = int(text.strip())
        elif kind is Decimal:
            value = Decimal(text.strip())
        elif kind is datetime:
            value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, InvalidOperation):
        example = {int: "42", Decimal: "10.25", datetime: "2026-11-25T09:30:00+01:00"}[kind]
        raise InvalidArgument(
            f"{where}: attribute {name!r} expects {type_name(kind)} such as {example}, got {text!r:.80}", argument
        ) from None
    return check_value(kind, value, name, where, argument)


@dataclass(frozen=True)
class AttributeCondition:
    """One checked filter on an attribute: its name, its type, a lookup of :data:`LOOKUPS` and the typed value.

    ``value`` is a tuple of values for ``in``.
    """

    name: str
    kind: type
    lookup: str
    value: Any

    @property
    def column(self) -> str:
        """The column the attribute's type is stored in."""
        return f"{ATTRIBUTE_TYPES[self.kind]}_value"


def split_lookup(key: Any, where: str, argument: str = "attributes") -> tuple[str, str]:
    """``"amount__gte"`` as ``("amount", "gte")``, ``"region"`` as ``("region", "eq")``; InvalidArgument otherwise."""
    if not isinstance(key, str):
        raise InvalidArgument(f"{where}: an attribute filter is named by a string, got {key!r:.80}", argument)
    name, _, lookup = key.partition("__")
    lookup = lookup or "eq"
    if lookup not in LOOKUPS:
        raise InvalidArgument(
            f"{where}: unknown lookup {lookup!r:.40} in {key!r:.80}; use one of {', '.join(LOOKUPS)}", argument
        )
    return name, lookup
