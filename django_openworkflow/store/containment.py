"""JSON containment in SQL for databases without PostgreSQL's ``@>``: search by input.

``{"customer": 42}`` finds the runs whose input contains it, with the rules
of :func:`~django_openworkflow.store.core.contains` (PostgreSQL's below the
top level) on every database, so a search finds the same runs everywhere:

- an object contains every key of the pattern, each with a containing value;
- an array contains each element of the pattern in some element of its own
  (``{"tags": ["vip"]}`` finds ``{"tags": ["new", "vip"]}``, while
  ``{"tags": "vip"}`` does not: a string is not an array);
- scalars are equal and of one JSON type: numbers by value and exactly
  (``1`` finds ``1.0``; 2**53 does not find 2**53 + 1), strings case- and
  accent-sensitively, ``true`` is not ``1``.

A pattern compiles to one boolean SQL expression over the input column:
a type test and a value test per leaf, and an ``EXISTS`` over the array's
elements per array. :class:`ContainmentCompiler` walks the pattern; each
backend that needs it subclasses it with its dialect's JSON functions
(SQLite's ``json_each`` in ``backends/sqlite.py``, MariaDB's and MySQL's
``JSON_TABLE`` in ``backends/mysql.py``). Neither database can index that; PostgreSQL's GIN index
(migration 0008) serves ``@>`` there.
"""

from __future__ import annotations

import math
from typing import Any

from ..definitions.payload import check_text

MAX_DEPTH = 16
MAX_LEAVES = 64


def check_pattern(pattern: Any) -> dict[str, Any]:
    """``pattern`` if it is a JSON object a search can use; ValueError naming what is wrong otherwise."""
    if not isinstance(pattern, dict):
        kind = type(pattern).__name__
        raise ValueError(f'an input search is a JSON object, such as {{"customer": 42}}, not a {kind}')
    leaves = 0

    def walk(value: Any, depth: int, where: str) -> None:
        nonlocal leaves
        if depth > MAX_DEPTH:
            raise ValueError(f"the input search nests deeper than {MAX_DEPTH} levels (at {where})")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ValueError(f"the input search has a key that is not a string at {where}: {key!r}")
                if '"' in key or "\\" in key:
                    raise ValueError(f"the input search's keys cannot contain quotes or backslashes: {key!r}")
                # PostgreSQL reads no NUL in jsonb, and no driver sends a lone surrogate: an error, not a 500.
                check_text(key, f"the input search's key at {where}")
                walk(item, depth + 1, f"{where}.{key}")
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, depth + 1, f"{where}[{index}]")
        else:
            leaves += 1
            if leaves > MAX_LEAVES:
                raise ValueError(f"the input search has more than {MAX_LEAVES} values")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"the input search has a number JSON cannot hold at {where}: {value!r}")
            if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
                raise ValueError(f"the input search has an integer too large to compare at {where}: {value!r}")
            if isinstance(value, str):
                check_text(value, f"the input search's value at {where}")
            if value is not None and not isinstance(value, str | int | float | bool):
                raise ValueError(f"the input search has a {type(value).__name__} at {where}, not a JSON value")

    walk(pattern, 0, "$")
    return pattern


class ContainmentCompiler:
    """Turns a pattern into ``(sql, params)``: the pattern's rules, over one dialect's JSON functions."""

    def __init__(self, column: str) -> None:
        self.column = column
        self.aliases = 0

    def compile(self, pattern: dict[str, Any]) -> tuple[str, list[Any]]:
        return self.match(pattern, self.column, self.root())

    def match(self, pattern: Any, doc: str, path: Any) -> tuple[str, list[Any]]:
        if isinstance(pattern, dict):
            parts = [self.is_type(doc, path, "object")]
            parts += [self.member(doc, path, key, value) for key, value in pattern.items()]
        elif isinstance(pattern, list):
            parts = [self.is_type(doc, path, "array")] + [self.some_element(doc, path, item) for item in pattern]
        elif pattern is None:
            parts = [self.is_type(doc, path, "null")]
        elif isinstance(pattern, bool):
            parts = [self.is_type(doc, path, "true" if pattern else "false")]
        elif isinstance(pattern, int | float):
            parts = [self.is_type(doc, path, "number"), self.number_equals(doc, path, pattern)]
        else:
            parts = [self.is_type(doc, path, "string"), self.string_equals(doc, path, pattern)]
        return " AND ".join(f"({sql})" for sql, _ in parts), [param for _, params in parts for param in params]

    def member(self, doc: str, path: Any, key: str, value: Any) -> tuple[str, list[Any]]:
        """The object at ``path`` has ``key``, with a value that contains ``value``."""
        return self.match(value, doc, self.child(path, key))

    def alias(self) -> str:
        self.aliases += 1
        return f"owf_e{self.aliases}"

    # The dialect: a path's root and child, a JSON type test, value tests, and "some element matches".
    def root(self) -> Any:
        raise NotImplementedError

    def child(self, path: Any, key: str) -> Any:
        raise NotImplementedError

    def is_type(self, doc: str, path: Any, kind: str) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def number_equals(self, doc: str, path: Any, value: float) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def string_equals(self, doc: str, path: Any, value: str) -> tuple[str, list[Any]]:
        raise NotImplementedError

    def some_element(self, doc: str, path: Any, item: Any) -> tuple[str, list[Any]]:
        raise NotImplementedError
