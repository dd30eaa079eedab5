"""Calling ``manage.py workflows`` from a test: its text output, or its ``--json`` output parsed."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.core.management import call_command


def workflows(*args: str) -> str:
    """What ``manage.py workflows ARGS`` prints."""
    out = StringIO()
    call_command("workflows", *args, stdout=out)
    return out.getvalue()


def as_json(*args: str) -> Any:
    """``manage.py workflows ARGS --json``, parsed."""
    return json.loads(workflows(*args, "--json"))
