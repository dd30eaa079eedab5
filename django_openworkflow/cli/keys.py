"""``manage.py workflows rotate-keys``: re-encrypt stored payloads to the first key (see ``store/rotation.py``).

The procedure (docs/howto/encryption.md): put the new key first in
``OPENWORKFLOW["PAYLOAD_ENCRYPTION"]``, the old one after it, and deploy that
to every process; run this until ``--check`` finds nothing left; then remove
the old key. Interrupted, it loses nothing: run it again, it reads only the
values not yet under the first key.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from ..encryption import EncryptionNotAvailable, keyring
from ..formatting import format_table, plural
from ..store.rotation import PAYLOAD_COLUMNS, ColumnProgress, pending_counts, rotate_column


def _batch_size(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {value}")
    return number


def add_rotate_keys_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "rotate-keys",
        parents=[common],
        help="re-encrypt stored payloads with the first key of OPENWORKFLOW['PAYLOAD_ENCRYPTION'] (resumable)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="count the values not yet under the first key, write nothing; exit 1 when there are any",
    )
    parser.add_argument(
        "--batch-size", type=_batch_size, default=500, metavar="N", help="rows per transaction (default 500)"
    )


def rotate_keys_command(options: dict[str, Any], out: OutputWrapper) -> None:
    """``workflows rotate-keys [--check] [--batch-size N]``: rewrite every payload column, printing progress."""
    try:
        ring = keyring()
    except EncryptionNotAvailable as exc:
        raise CommandError(str(exc)) from None
    if ring is None:
        raise CommandError("OPENWORKFLOW['PAYLOAD_ENCRYPTION'] is not set: there is no key to encrypt with")
    as_json = bool(options.get("json"))
    if options.get("check"):
        counts = pending_counts()
        left = sum(count for _, count in counts)
        if as_json:
            out.write(json.dumps({"key_id": ring.current_id, "pending": dict(counts), "total": left}))
        else:
            out.write(format_table(("column", "not under the first key"), counts))
            out.write(f"{plural(left, 'value')} not yet under the first key ({ring.current_id})")
        if left:
            raise CommandError(f"{plural(left, 'value')} left: run `workflows rotate-keys`")
        return

    def report(progress: ColumnProgress) -> None:
        if not as_json:
            out.write(
                f"{progress.name}: {progress.rewritten} re-encrypted, {progress.undecryptable} undecryptable, "
                f"{progress.changed} written meanwhile by others"
            )
            out.flush()

    done = [
        rotate_column(model, name, batch_size=options["batch_size"], on_batch=report) for model, name in PAYLOAD_COLUMNS
    ]
    rewritten = sum(p.rewritten for p in done)
    undecryptable = sum(p.undecryptable for p in done)
    if as_json:
        columns = {p.name: {"rewritten": p.rewritten, "undecryptable": p.undecryptable, "changed": p.changed}
                   for p in done}  # fmt: skip
        out.write(json.dumps({"key_id": ring.current_id, "columns": columns, "rewritten": rewritten,
                              "undecryptable": undecryptable}))  # fmt: skip
        return
    out.write(f"{plural(rewritten, 'value')} re-encrypted with the first key ({ring.current_id})")
    if undecryptable:
        out.write(
            f"{plural(undecryptable, 'value')} could not be decrypted with the configured keys and were left as "
            "they are: add the key they need (docs/howto/encryption.md), then run this again"
        )
