"""What a workflow's ``on_failure`` callable is told when one of its runs fails for good."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RunFailure:
    """A run that failed for good, as ``@workflow(on_failure=...)`` receives it.

    ``error`` is the run's error as it will be stored (``type``, ``message``,
    ``traceback``, ``step`` when a step raised it, ``child_error`` when an
    uncaught child failure did). ``attempts`` counts the workflow-level
    attempts made, this one included.
    """

    run_id: Any
    workflow_name: str
    version: str | None
    input: Any
    error: dict[str, Any] = field(default_factory=dict)
    attempts: int = 1
