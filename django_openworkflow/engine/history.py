"""The step history: a run's journal as replay reads it."""

from __future__ import annotations

from typing import Any

from ..states import StepStatus
from ..store.records import AttemptRecord


class History:
    """A run's journal indexed by durable key, loaded once per slice.

    Failures count toward a step's budget only within the current
    workflow-level attempt: a run retried by its workflow retry policy gives
    each failed step a fresh budget, while completed steps stay completed.
    """

    def __init__(self, attempts: list[AttemptRecord], run_attempt: int) -> None:
        self.run_attempt = run_attempt
        self.count = len(attempts)
        self.completed: dict[str, AttemptRecord] = {}
        self.open: dict[str, AttemptRecord] = {}
        self.kinds: dict[str, str] = {}
        self.failures: dict[str, int] = {}
        self.failed_attempts: dict[str, int] = {}  # of every workflow attempt: numbers step attempts
        self.last_error: dict[str, dict[str, Any]] = {}
        for attempt in attempts:
            key = attempt.step_name
            self.kinds[key] = attempt.kind
            if attempt.status == StepStatus.COMPLETED:
                self.completed[key] = attempt
                self.open.pop(key, None)
            elif attempt.status == StepStatus.FAILED:
                self.open.pop(key, None)
                if (attempt.error or {}).get("run_attempt", 0) == run_attempt:
                    self.add_failure(key, attempt.error or {})
                else:
                    self.failed_attempts[key] = self.failed_attempts.get(key, 0) + 1
            else:
                self.open[key] = attempt

    def add_failure(self, key: str, error: dict[str, Any]) -> int:
        """Count a failure of ``key`` in this workflow attempt; returns the count."""
        self.failures[key] = self.failures.get(key, 0) + 1
        self.failed_attempts[key] = self.failed_attempts.get(key, 0) + 1
        self.last_error[key] = error
        return self.failures[key]
