"""Retry policies and backoff arithmetic."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from ..durations import Duration, parse_duration


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how fast to retry a failing step or workflow.

    The delay before attempt ``n + 1`` (after ``n`` failures) is
    ``min(initial_interval * backoff_coefficient ** (n - 1), maximum_interval)``.
    ``maximum_attempts`` counts attempts, the first included; ``0`` means
    unlimited.
    """

    initial_interval: Duration = "1s"
    backoff_coefficient: float = 2.0
    maximum_interval: Duration = "100s"
    maximum_attempts: int = 10
    _initial: timedelta = field(init=False, repr=False, compare=False)
    _maximum: timedelta = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        initial = parse_duration(self.initial_interval)
        maximum = parse_duration(self.maximum_interval)
        if initial <= timedelta(0):
            raise ValueError(f"RetryPolicy.initial_interval must be positive, got {self.initial_interval!r}")
        if maximum < initial:
            raise ValueError(
                f"RetryPolicy.maximum_interval ({self.maximum_interval!r}) is shorter than "
                f"initial_interval ({self.initial_interval!r})"
            )
        if isinstance(self.backoff_coefficient, bool) or not self.backoff_coefficient >= 1:
            raise ValueError(f"RetryPolicy.backoff_coefficient must be >= 1, got {self.backoff_coefficient!r}")
        if (
            isinstance(self.maximum_attempts, bool)
            or not isinstance(self.maximum_attempts, int)
            or self.maximum_attempts < 0
        ):
            raise ValueError(
                f"RetryPolicy.maximum_attempts must be an int >= 0 (0 = unlimited), got {self.maximum_attempts!r}"
            )
        object.__setattr__(self, "_initial", initial)
        object.__setattr__(self, "_maximum", maximum)

    def allows_another(self, failures: int) -> bool:
        """After ``failures`` failed attempts, may one more be made?"""
        return self.maximum_attempts == 0 or failures < self.maximum_attempts

    def delay_after(self, failures: int) -> timedelta:
        """The wait before the next attempt, after ``failures`` (>= 1) failed ones."""
        exponent = max(failures - 1, 0)
        try:
            seconds = self._initial.total_seconds() * self.backoff_coefficient**exponent
        except OverflowError:
            return self._maximum
        return min(timedelta(seconds=min(seconds, self._maximum.total_seconds())), self._maximum)


DEFAULT_STEP_RETRY_POLICY = RetryPolicy()
DEFAULT_WORKFLOW_RETRY_POLICY = RetryPolicy(maximum_attempts=1)
# A run whose workflow this worker does not have waits for a worker that does.
UNKNOWN_WORKFLOW_BACKOFF = RetryPolicy(initial_interval="5s", maximum_interval="5m", maximum_attempts=0)
