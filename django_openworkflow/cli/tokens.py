"""``manage.py workflows token``: create, list and revoke the HTTP API's tokens (``ApiToken``).

``token create`` prints the token once, on a line of its own (the last
one), or as ``"token"`` with ``--json``: only its SHA-256 is stored. A
token acts with its user's permissions on workflow runs.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ..durations import parse_duration
from ..formatting import format_table, format_time, json_text, printable
from ..models import TOKEN_PREFIX_LENGTH, ApiToken
from .common import find_user


def _expiry(value: str) -> datetime:
    """``--expires``: a duration from now with its unit (``90d``, ``12h``) or an ISO 8601 time."""
    moment = None
    try:
        moment = parse_datetime(value)
    except ValueError:
        pass
    if moment is None and not value.strip().replace(".", "", 1).isdigit():  # a bare number would be milliseconds
        try:
            moment = timezone.now() + parse_duration(value)
        except (ValueError, OverflowError):
            pass
    if moment is None:
        raise argparse.ArgumentTypeError(f"{value!r} is neither a duration such as 90d nor an ISO 8601 time")
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment)
    if moment <= timezone.now():
        raise argparse.ArgumentTypeError(f"{value!r} is in the past")
    return moment


def add_token_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    token = sub.add_parser("token", help="create, list and revoke the HTTP API's tokens")
    actions = token.add_subparsers(dest="token_action", metavar="ACTION", required=True)
    create = actions.add_parser("create", parents=[common], help="create a token and print it, once")
    create.add_argument("--user", required=True, metavar="USERNAME", help="the user the token acts as")
    create.add_argument("--name", required=True, help="what or who uses it, e.g. ci")
    create.add_argument(
        "--expires", type=_expiry, default=None, metavar="WHEN", help="a duration from now (90d) or an ISO 8601 time"
    )
    listing = actions.add_parser("list", parents=[common], help="the tokens, newest first (never the tokens)")
    listing.add_argument("--user", default=None, metavar="USERNAME", help="only this user's tokens")
    revoke = actions.add_parser("revoke", parents=[common], help="revoke a token: requests with it get 401")
    revoke.add_argument("prefix", metavar="PREFIX", help="the token's prefix as lists show it (owf_ and 10 digits)")


def _row_json(row: ApiToken) -> dict[str, Any]:
    return {
        "prefix": row.prefix,
        "user": row.user.get_username(),
        "name": row.name,
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
        "expires_at": row.expires_at,
        "revoked_at": row.revoked_at,
    }


def _time(value: datetime | None) -> str:
    return format_time(value) if value else "-"


def _list(found: list[ApiToken], options: dict[str, Any], out: OutputWrapper) -> None:
    if options["json"]:
        out.write(json_text([_row_json(row) for row in found], indent=2))
    elif not found:
        out.write("No API tokens.")
    else:
        headers = ("prefix", "user", "name", "created", "last used", "expires", "revoked")
        times = [(r.created_at, r.last_used_at, r.expires_at, r.revoked_at) for r in found]
        cells = [(r.prefix, r.user.get_username(), r.name, *map(_time, t)) for r, t in zip(found, times, strict=True)]
        out.write(format_table(headers, cells))


def token_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows token create|list|revoke``."""
    action = options["token_action"]
    if action == "create":
        row, token = ApiToken.objects.create_token(
            find_user(options["user"]), options["name"], expires_at=options["expires"]
        )
        if options["json"]:
            out.write(json_text({**_row_json(row), "token": token}, indent=2))
            return
        until = f", valid until {format_time(row.expires_at)}" if row.expires_at else ""
        out.write(printable(f"Created API token {row.prefix} of {row.user.get_username()} ({row.name}){until}."))
        out.write("Copy it now: it is not stored and cannot be shown again. Send it as 'Authorization: Bearer TOKEN'.")
        out.write(token)
        return
    rows = ApiToken.objects.select_related("user")
    if action == "list":
        _list(list(rows.filter(user=find_user(options["user"])) if options["user"] else rows), options, out)
        return
    _revoke(rows, options, out)


def _revoke(rows: Any, options: dict[str, Any], out: OutputWrapper) -> None:
    prefix = options["prefix"].strip()[:TOKEN_PREFIX_LENGTH]  # a whole token names its own prefix
    row = rows.filter(prefix=prefix).first()
    if row is None:
        raise CommandError(printable(f"no API token {prefix!r}; `workflows token list` shows them"))
    if row.revoked_at is None:
        ApiToken.objects.filter(pk=row.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        row.refresh_from_db()
        message = f"Revoked API token {row.prefix} of {row.user.get_username()} ({row.name})."
    else:
        message = f"API token {row.prefix} was revoked already, at {format_time(row.revoked_at)}."
    out.write(json_text(_row_json(row), indent=2) if options["json"] else printable(message))
