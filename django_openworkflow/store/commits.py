"""Waiting for the caller's transactions, on every database alias, before acting on a start.

With the workflow tables on an alias of their own, a start's row commits on
that alias while the caller's own writes commit on another (``default``):
what must wait for "the commit" waits for both. A Django ``TestCase`` wraps
each test in transactions that never commit; those are not the caller's
(Django's ``durable`` atomic blocks ignore them the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connections, transaction


def opened_by_caller(alias: str) -> bool:
    """Whether the code on this thread is inside an atomic block of its own on ``alias``.

    The atomic blocks a ``TestCase`` (or pytest-django's ``db`` fixture)
    opens around a test do not count: nothing the test does commits them.
    """
    connection = connections[alias]
    if not connection.in_atomic_block:
        return False
    blocks = connection.atomic_blocks
    # No block recorded: autocommit was turned off by hand, a transaction all the same.
    return not blocks or any(not getattr(block, "_from_testcase", False) for block in blocks)


def callers_transactions(exclude: Iterable[str] = ()) -> list[str]:
    """The aliases (``default`` first) on which the caller has a transaction open, but ``exclude``."""
    skip = set(exclude)
    aliases = [connection.alias for connection in connections.all(initialized_only=True)]
    aliases.sort(key=lambda alias: alias != DEFAULT_DB_ALIAS)
    return [alias for alias in aliases if alias not in skip and opened_by_caller(alias)]


def after_callers_commits(fn: Callable[[], object], exclude: Iterable[str] = ()) -> None:
    """Call ``fn`` once every transaction the caller has open (on any alias but ``exclude``) has committed.

    At once when there is none. A transaction that rolls back drops ``fn``,
    as ``transaction.on_commit`` does: it is registered on one open
    transaction at a time, and looks again when that one commits.
    """
    skip = tuple(exclude)
    open_on = callers_transactions(skip)
    if not open_on:
        fn()
        return
    transaction.on_commit(lambda: after_callers_commits(fn, skip), using=open_on[0])
