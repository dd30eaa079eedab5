"""The journal's write records, shared by the generic and the PostgreSQL store paths."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass
class AttemptUpdate:
    """Finish an attempt already in the journal."""

    attempt_id: int
    status: str
    finished_at: datetime
    output: Any = None
    error: dict[str, Any] | None = None


@dataclass
class NewAttempt:
    """A step attempt to insert."""

    step_name: str
    kind: str
    status: str
    started_at: datetime
    context: dict[str, Any] | None = None
    output: Any = None
    error: dict[str, Any] | None = None
    finished_at: datetime | None = None


@dataclass
class ChildStart:
    """A child run to insert, linked to the attempt inserted in the same transaction."""

    workflow_name: str
    version: str | None
    input: Any
