"""What the ``workflows`` subcommands share: printing JSON, one-line errors, reading JSON options, finding a run."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, OutputWrapper

from ..formatting import json_text, printable, read_json
from ..models import WorkflowRun
from ..store import queries


def print_json(out: OutputWrapper, value: Any) -> None:
    """``value`` as indented JSON."""
    out.write(json_text(value, indent=2))


def command_error(exc: Exception) -> CommandError:
    """An exception from the client as a one-line CommandError (its text may quote client data)."""
    lines = str(exc).splitlines()
    return CommandError(printable(lines[0]) if lines else type(exc).__name__)


def read_json_option(text: str | None, option: str) -> Any:
    """An option's JSON text (None: null), or a CommandError saying what is wrong with it."""
    if text is None:
        return None
    try:
        return read_json(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not valid JSON: {exc}") from None
    except ValueError as exc:  # nested too deep to read
        raise CommandError(f"{option} {exc}") from None


def resolve_run(value: str) -> WorkflowRun:
    """A run by full id or by a unique prefix of 8+ characters; CommandError otherwise."""
    run_id = queries.parse_run_id(value)
    if run_id is not None:
        run = queries.runs().filter(id=run_id).first()
        if run is None:
            raise CommandError(f"no workflow run with id {value}")
        return run
    prefix = value.strip().lower()
    if len(prefix) < 8 or any(c not in "0123456789abcdef-" for c in prefix):
        raise CommandError(f"{value!r} is not a workflow run id (give the whole id or its first 8 characters)")
    # Ids are stored without dashes on SQLite and compared as text on PostgreSQL:
    # a prefix up to the first dash (the short id the list shows) works on both.
    matches = list(queries.runs().filter(id__startswith=prefix.split("-")[0])[:2])
    if not matches:
        raise CommandError(f"no workflow run with an id starting with {prefix}")
    if len(matches) > 1:
        raise CommandError(f"more than one workflow run has an id starting with {prefix}; give more of it")
    return matches[0]


def find_user(username: str) -> Any:
    """The user of that username; CommandError if there is none."""
    users = get_user_model()._default_manager
    try:
        return users.get_by_natural_key(username)
    except users.model.DoesNotExist:
        raise CommandError(printable(f"no user {username!r}")) from None
