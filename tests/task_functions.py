"""Task functions for tests/test_tasks_backend.py.

Imported by that module only while ``TASKS`` names the workflow backend:
``@task`` validates each task against its backend when it is decorated.
"""

from __future__ import annotations

import asyncio

from django_openworkflow.errors import NonRetryableError

try:  # Django >= 6.0
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task

CALLS: dict[str, int] = {}
"""How often each failing task was called, by key: the in-process worker shares this module."""


def _count(key: str) -> int:
    CALLS[key] = CALLS.get(key, 0) + 1
    return CALLS[key]


@task
def add(a, b, *, times=1):
    return (a + b) * times


@task
def noop():
    return None


@task
def returns_tuple():
    return (1, "two", {"three": [3]})


@task
async def add_async(a, b):
    await asyncio.sleep(0)
    return a + b


@task
def always_fails(message):
    raise ValueError(message)


@task
def fails_not_retryable():
    raise NonRetryableError("do not try again")


@task(takes_context=True)
def flaky_with_context(context, key):
    """Fails its first attempt; returns what its context says on the second."""
    if _count(key) == 1:
        raise RuntimeError("first attempt fails")
    return {"attempt": context.attempt, "id": context.task_result.id, "status": str(context.task_result.status)}


@task(queue_name="emails", priority=5)
def send_email(to):
    return f"sent to {to}"


def plain(x=None):
    """Not a task: tests decorate it with bad options."""
    return x
