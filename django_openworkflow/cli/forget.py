"""``manage.py workflows forget app_label.model:pk --user USERNAME``: erase an object's runs' payloads.

The user named must hold the permission ``forget`` asks of every front door
(``django_openworkflow.delete_workflowrun``); the runs record their username
and Django's admin log records the erasure under them.
"""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..client.erasure import PERMISSION, forget
from ..client.subjects import FORMAT
from ..errors import ForgetRefused, InvalidArgument
from ..formatting import plural, printable
from .common import command_error, find_user, print_json


def add_forget_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "forget",
        parents=[common],
        help="erase the payloads of an object's finished runs (and their child runs), keeping the runs",
    )
    parser.add_argument("subject", metavar="SUBJECT", help=f"the object, as {FORMAT} (shop.order:42)")
    parser.add_argument(
        "--user", required=True, metavar="USERNAME", help=f"who erases: a user with the {PERMISSION} permission"
    )
    parser.add_argument(
        "--cancel-live", action="store_true", help="cancel the object's unfinished runs first instead of refusing"
    )


def forget_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows forget SUBJECT --user USERNAME [--cancel-live]``."""
    user = find_user(options["user"])
    if not user.has_perm(PERMISSION):
        raise CommandError(printable(f"user {options['user']!r} lacks the {PERMISSION} permission"))
    try:
        done = forget(options["subject"], cancel_live=options["cancel_live"], by=user)
    except ForgetRefused as exc:
        raise CommandError(printable(str(exc))) from None
    except InvalidArgument as exc:
        raise command_error(exc) from None
    if options["json"]:
        print_json(out, {"subject": str(done.subject), "erased": done.erased, "already": done.already,
                         "canceled": done.canceled})  # fmt: skip
        return
    canceled = f", {len(done.canceled)} of them canceled first" if done.canceled else ""
    out.write(
        printable(
            f"{done.subject}: erased the payloads of {plural(len(done.erased), 'run')}{canceled}; "
            f"{plural(len(done.already), 'run')} erased before."
        )
    )
