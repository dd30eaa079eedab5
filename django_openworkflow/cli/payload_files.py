"""``manage.py workflows payload-files``: the offloaded payloads' files no row references (``store/payload_files.py``).

Lists them; with ``--delete``, deletes them. A file younger than
``--older-than`` (default 1h) is neither listed as an orphan nor deleted: its
row may be in a transaction that has not committed yet.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.utils import timezone

from .. import offload
from ..formatting import plural
from ..store import payload_files
from .prune import _duration


def add_payload_files_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "payload-files",
        parents=[common],
        help="list the offloaded payloads' files no row references (OPENWORKFLOW['PAYLOAD_OFFLOAD'])",
    )
    parser.add_argument("--delete", action="store_true", help="delete those files; exit 1 if any are found without")
    parser.add_argument(
        "--older-than",
        type=_duration,
        default=timedelta(hours=1),
        metavar="DURATION",
        help="leave files modified more recently than this (default 1h): their row may not be committed yet",
    )
    parser.add_argument(
        "--storage", default=None, metavar="ALIAS", help="the STORAGES alias to look in (default: the setting's)"
    )


def payload_files_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows payload-files [--delete] [--older-than D] [--storage ALIAS]``: orphaned files, listed or deleted."""
    try:
        alias = options.get("storage") or offload.policy().storage
    except offload.OffloadSettingError as exc:
        raise CommandError(str(exc)) from None
    if alias is None:
        raise CommandError("OPENWORKFLOW['PAYLOAD_OFFLOAD'] is not set: name the storage to look in with --storage")
    from django.core.files.storage import storages
    from django.core.files.storage.handler import InvalidStorageError

    try:
        storages[alias]
    except InvalidStorageError:
        raise CommandError(f"settings.STORAGES has no storage {alias!r}") from None
    found, young = payload_files.orphans(alias, timezone.now(), options["older_than"])
    deleted = payload_files.delete_files(found) if options.get("delete") else 0
    if options.get("json"):
        out.write(json.dumps({"storage": alias, "orphans": [file.reference for file in found], "deleted": deleted,
                              "younger": young}))  # fmt: skip
    else:
        for file in found:
            out.write(offload.parse_reference(file.reference)[1])
        verb = "deleted" if options.get("delete") else "found"
        out.write(f"{plural(len(found), 'orphaned file')} {verb} in storage {alias!r}")
        if young:
            out.write(f"{plural(young, 'unreferenced file')} younger than --older-than left alone")
    if found and not options.get("delete"):
        raise CommandError(f"{plural(len(found), 'orphaned file')}: run `workflows payload-files --delete`")
