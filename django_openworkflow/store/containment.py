"""JSON containment in SQL for databases without PostgreSQL's ``@>``: search by input.

``{"customer": 42}`` finds the runs whose input contains it, with the rules
of :func:`~django_openworkflow.store.core.contains` (PostgreSQL's below the
top level) on every database, so a search finds the same runs everywhere:

- an object contains every key of the pattern, each with a containing value;
- an array contains each element of the pattern in some element of its own
  (``{"tags": ["vip"]}`` finds ``{"tags": ["new", "vip"]}``, while
  ``{"tags": "vip"}`` does not: a string is not an array);
- scalars are equal and of one JSON type: numbers by value (``1`` finds
  ``1.0``), strings case- and accent-sensitively, ``true`` is not ``1``.

A pattern compiles to one boolean SQL expression over the input column:
a type test and a value test per leaf, and an ``EXISTS`` over the array's
elements per array (SQLite's ``json_each``, MariaDB's and MySQL's
``JSON_TABLE``). Neither database can index that; PostgreSQL's GIN index
(migration 0008) serves ``@>`` there.
"""

from __future__ import annotations

import json
import math
from typing import Any

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
            if value is not None and not isinstance(value, str | int | float | bool):
                raise ValueError(f"the input search has a {type(value).__name__} at {where}, not a JSON value")

    walk(pattern, 0, "$")
    return pattern


class _Compiler:
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


class SQLiteCompiler(_Compiler):
    """SQLite's JSON1: a path is an SQL expression (a parameter or an element's ``fullkey``) into one document.

    ``json_each`` gives each element's full path (``fullkey``), so nested patterns keep
    reading the input column itself; ``json_type`` names the JSON type.
    """

    TYPES = {"number": "IN ('integer', 'real')", "string": "= 'text'"}

    def root(self) -> tuple[str, list[Any]]:
        return "%s", ["$"]

    def child(self, path: tuple[str, list[Any]], key: str) -> tuple[str, list[Any]]:
        sql, params = path
        if sql == "%s":  # a path known in Python: extend it there
            return "%s", [f'{params[0]}."{key}"']
        return f"({sql} || %s)", [*params, f'."{key}"']

    def member(self, doc: str, path: tuple[str, list[Any]], key: str, value: Any) -> tuple[str, list[Any]]:
        if key.isascii() and key.isprintable():
            return super().member(doc, path, key, value)
        # A path names a key as the JSON text spells it (an escaped \\u00fc or ü, as written):
        # look the key up among the object's members by its value, then use their own path.
        alias = self.alias()
        where, params = self.match(value, doc, (f"{alias}.fullkey", []))
        members = f"json_each({doc}, {path[0]}) AS {alias}"
        return f"EXISTS (SELECT 1 FROM {members} WHERE {alias}.key = %s AND {where})", [*path[1], key, *params]

    def is_type(self, doc: str, path: tuple[str, list[Any]], kind: str) -> tuple[str, list[Any]]:
        test = self.TYPES.get(kind, f"= '{kind}'")
        return f"json_type({doc}, {path[0]}) {test}", list(path[1])

    def number_equals(self, doc: str, path: tuple[str, list[Any]], value: float) -> tuple[str, list[Any]]:
        return self._equals(doc, path, value)

    def string_equals(self, doc: str, path: tuple[str, list[Any]], value: str) -> tuple[str, list[Any]]:
        return self._equals(doc, path, value)  # the BINARY collation: byte by byte

    @staticmethod
    def _equals(doc: str, path: tuple[str, list[Any]], value: float | str) -> tuple[str, list[Any]]:
        return f"json_extract({doc}, {path[0]}) = %s", [*path[1], value]

    def some_element(self, doc: str, path: tuple[str, list[Any]], item: Any) -> tuple[str, list[Any]]:
        alias = self.alias()
        where, params = self.match(item, doc, (f"{alias}.fullkey", []))
        return f"EXISTS (SELECT 1 FROM json_each({doc}, {path[0]}) AS {alias} WHERE {where})", [*path[1], *params]


class MySQLCompiler(_Compiler):
    """MariaDB's and MySQL's JSON functions: a path is a literal; each array element is a document of its own.

    ``JSON_TABLE`` turns an array into rows, one JSON fragment each, which
    nested patterns then read at ``$``.
    """

    TYPES = {
        "object": "= 'OBJECT'",
        "array": "= 'ARRAY'",
        "null": "= 'NULL'",
        "true": "= 'BOOLEAN'",
        "false": "= 'BOOLEAN'",
        "number": "IN ('INTEGER', 'UNSIGNED INTEGER', 'DOUBLE', 'DECIMAL')",
        "string": "= 'STRING'",
    }

    def root(self) -> str:
        return "$"

    def child(self, path: str, key: str) -> str:
        return f'{path}."{key}"'

    def member(self, doc: str, path: str, key: str, value: Any) -> tuple[str, list[Any]]:
        escaped = json.dumps(key)[1:-1]
        if escaped == key:
            return super().member(doc, path, key, value)
        # A path names a key as the JSON text spells it: escaped (\\u00fc, as Django writes JSON) or not.
        spelled = [self.match(value, doc, self.child(path, spelling)) for spelling in (escaped, key)]
        return " OR ".join(f"({sql})" for sql, _ in spelled), [param for _, params in spelled for param in params]

    def is_type(self, doc: str, path: str, kind: str) -> tuple[str, list[Any]]:
        sql, params = f"JSON_TYPE(JSON_EXTRACT({doc}, %s)) {self.TYPES[kind]}", [path]
        if kind in ("true", "false"):  # both are BOOLEAN: tell them apart by their text
            sql, params = f"{sql} AND JSON_EXTRACT({doc}, %s) = '{kind}'", [path, path]
        return sql, params

    def number_equals(self, doc: str, path: str, value: float) -> tuple[str, list[Any]]:
        return f"CAST(JSON_VALUE({doc}, %s) AS DOUBLE) = %s", [path, float(value)]

    def string_equals(self, doc: str, path: str, value: str) -> tuple[str, list[Any]]:
        # The column's collation may ignore case and accents; JSON containment does not.
        return f"JSON_VALUE({doc}, %s) = BINARY %s", [path, value]

    def some_element(self, doc: str, path: str, item: Any) -> tuple[str, list[Any]]:
        alias = self.alias()
        where, params = self.match(item, f"{alias}.v", "$")
        rows = f"JSON_TABLE(JSON_EXTRACT({doc}, %s), '$[*]' COLUMNS (v JSON PATH '$')) AS {alias}"
        return f"EXISTS (SELECT 1 FROM {rows} WHERE {where})", [path, *params]
