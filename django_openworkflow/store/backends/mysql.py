"""MySQL and MariaDB: the UTC clock, JSON containment with PostgreSQL's rules, READ COMMITTED.

Claims use the portable ``SELECT ... FOR UPDATE SKIP LOCKED`` (MariaDB
10.6+, MySQL 8.0.1+). Idempotency keys are enforced by plain unique indexes
(created by migration 0005 on these databases only), which let any number
of NULL keys coexist, as the conditional constraints do elsewhere. There is
no LISTEN: workers and ``result()`` poll.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from django.core import checks
from django.db.models import BinaryField, DateTimeField, F, Func, QuerySet

from ...models import Gate
from ..containment import ContainmentCompiler
from ..core import contains, gate_name, tightest_room
from ..records import ConnectionRoom
from .base import Backend


class UTCNow(Func):
    """The database clock in UTC, whatever the server's or the session's time zone.

    ``CURRENT_TIMESTAMP`` (Django's ``Now()``) is in the session time zone,
    which Django does not set on MySQL; values are stored as UTC.
    """

    template = "UTC_TIMESTAMP(6)"
    output_field = DateTimeField()


class MySQLCompiler(ContainmentCompiler):
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
        """Equal by value, exactly: ``1`` is ``1.0``, but 2**53 + 1 is not 2**53.

        A number's text decides how it is compared, not ``JSON_TYPE`` (MariaDB
        calls ``1e+16`` an INTEGER): digits alone are an integer, compared as
        ``DECIMAL(65, 0)``, exact; any other text (``.``, an exponent) is a
        double, as Python wrote it, compared as a double with the pattern's
        own double, when the pattern has one exactly. A cast to DOUBLE alone
        would round both sides and find 2**53 + 1 when asked for 2**53.
        """
        text = f"JSON_VALUE({doc}, %s)"
        integral = value.is_integer() if isinstance(value, float) else True
        as_int = int(value) if integral and abs(value) < 10**64 else None
        as_double = float(value) if isinstance(value, float) or float(value) == value else None
        tests: list[str] = []
        params: list[Any] = []
        digits = "'^-?[0-9]+$'"
        if as_int is not None:
            tests.append(f"({text} REGEXP {digits} AND CAST({text} AS DECIMAL(65, 0)) = CAST(%s AS DECIMAL(65, 0)))")
            params += [path, path, str(as_int)]
        if as_double is not None:
            tests.append(f"({text} NOT REGEXP {digits} AND CAST({text} AS DOUBLE) = %s)")
            params += [path, path, as_double]
        return " OR ".join(tests), params

    def string_equals(self, doc: str, path: str, value: str) -> tuple[str, list[Any]]:
        # The column's collation may ignore case and accents; JSON containment does not.
        return f"JSON_VALUE({doc}, %s) = BINARY %s", [path, value]

    def some_element(self, doc: str, path: str, item: Any) -> tuple[str, list[Any]]:
        alias = self.alias()
        where, params = self.match(item, f"{alias}.v", "$")
        rows = f"JSON_TABLE(JSON_EXTRACT({doc}, %s), '$[*]' COLUMNS (v JSON PATH '$')) AS {alias}"
        return f"EXISTS (SELECT 1 FROM {rows} WHERE {where})", [path, *params]


class MySQLBackend(Backend):
    display_name = "mysql"

    def now(self) -> datetime:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT UTC_TIMESTAMP(6)")
            return self._aware(cursor.fetchone()[0])

    def now_expr(self, delta: timedelta | None = None) -> Any:
        return UTCNow() + delta if delta else UTCNow()

    def connection_room(self) -> ConnectionRoom | None:
        # The session's max_user_connections is the account's MAX_USER_CONNECTIONS where it has one,
        # else the server's (0: none). A user without the PROCESS privilege sees only its own threads.
        with self.connection.cursor() as cursor:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Threads_connected'")
            clients = int(cursor.fetchone()[1])
            cursor.execute(
                "SELECT @@GLOBAL.max_connections, @@max_user_connections, (SELECT COUNT(*) FROM"
                " information_schema.PROCESSLIST WHERE USER = SUBSTRING_INDEX(CURRENT_USER(), '@', 1))"
            )
            server, per_user, mine = cursor.fetchone()
        limits = [("max_connections", server, clients)]
        if per_user:
            limits.append(("max_user_connections", per_user, mine))
        return tightest_room(limits)

    def insert_with_ids(self, rows: list[Any]) -> None:
        if self.connection.features.can_return_rows_from_bulk_insert:  # MariaDB 10.5+
            super().insert_with_ids(rows)
            return
        for row in rows:  # MySQL has no INSERT ... RETURNING
            row.save(using=self.alias, force_insert=True)

    def lock_keys(self, keys: list[str]) -> None:
        """One upsert of the keys' gate rows, in sorted order.

        ``ON DUPLICATE KEY UPDATE`` takes an exclusive lock on an existing
        row at once; ``INSERT IGNORE`` followed by ``SELECT ... FOR UPDATE``
        would take a shared lock first, and claimers upgrading it together
        deadlock on a key's first use.
        """
        names = sorted({gate_name(key) for key in keys})
        if names:
            rows = ", ".join(["(%s)"] * len(names))
            with self.connection.cursor() as cursor:
                table = Gate._meta.db_table
                upsert = f"INSERT INTO `{table}` (`name`) VALUES {rows} ON DUPLICATE KEY UPDATE `name` = `name`"
                cursor.execute(upsert, names)

    def event_waits(self, queryset: Any, payload: Any) -> list[Any]:
        """Narrowed by JSON_CONTAINS in SQL, then held to PostgreSQL's rules in Python.

        JSON_CONTAINS also finds a scalar inside an array (``{"a": [1, 2]}``
        contains ``{"a": 1}``), which ``@>`` does not. The read locks the
        open waits it scans (FOR UPDATE): it waits for a worker that is
        recording a new wait of this type to commit, so the wait and this
        event are seen in one order by both sides.
        """
        # Django takes a None value for SQL NULL, not JSON null: without a payload, Python decides alone.
        narrowed = queryset if payload is None else queryset.filter(context__match__contained_by=payload)
        candidates = narrowed.select_for_update()
        return [attempt for attempt in candidates if contains(payload, (attempt.context or {}).get("match"))]

    def stored_form(self, column: str) -> Any:
        # The connection's collation compares text without regard to case: compare the bytes.
        return Func(F(column), template="CAST(%(expressions)s AS BINARY)", output_field=BinaryField())

    def input_containing(self, queryset: QuerySet[Any], pattern: dict[str, Any]) -> QuerySet[Any]:
        # JSON_CONTAINS finds a scalar inside an array ({"tags": "vip"} in ["vip"]): not the rules of the others.
        return self._compiled_containment(queryset, MySQLCompiler, pattern)

    def check(self) -> list[checks.CheckMessage]:
        messages: list[checks.CheckMessage] = []
        options = self.connection.settings_dict.get("OPTIONS", {})
        isolation = str(options.get("isolation_level", "read committed")).lower()
        if isolation != "read committed":
            messages.append(
                checks.Error(
                    f"the workflow database {self.alias!r} uses isolation level {isolation!r}",
                    hint=(
                        'Remove OPTIONS["isolation_level"] or set it to "read committed" (Django\'s default). '
                        "Under REPEATABLE READ a transaction keeps reading its first snapshot: an idempotent start "
                        "inside a transaction cannot see the run a concurrent start committed, and claims take "
                        "gap locks that block starts."
                    ),
                    id="openworkflow.E020",
                )
            )
        charset = str(options.get("charset", "")).lower()
        if charset != "utf8mb4":
            messages.append(
                checks.Warning(
                    f"the workflow database {self.alias!r} connects with charset {charset or 'utf8 (default)'!r}",
                    hint='Set OPTIONS["charset"] = "utf8mb4": payloads may hold any Unicode character.',
                    id="openworkflow.W020",
                )
            )
        return messages
