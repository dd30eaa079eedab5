"""Label values with a cap, so that no metric makes a series for every value a caller picks.

Every series a process has ever exported stays in its registry (and in
``/metrics``) until the process exits. A label fed with values that
callers choose (the name of a signal, sent by anyone allowed to send one;
a queue named in an API start; a step name built from data) would grow
both without end. So each label keeps the first ``kept`` distinct values it
sees per scope (per workflow, or once for the process), and reports every
further value as :data:`OTHER`. Values the code declares (registered
workflows and their queues) always keep their own series: they are bounded
by the code, not by the callers.

Imports nothing from prometheus-client: the gauges of :mod:`.collector`
and the counters of :mod:`.recorder` share these caps.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

from ..definitions.flow import DEFAULT_QUEUE
from ..definitions.registry import registry

OTHER = "_other"
"""The label value of everything beyond a cap."""

STEP_LABELS_KEPT = 100
"""Step names per workflow that get a series of their own."""
SIGNAL_LABELS_KEPT = 100
"""Signal names per workflow that get a series of their own."""
QUEUE_LABELS_KEPT = 100
"""Queues that no registered workflow declares and that get a series of their own."""
WORKFLOW_LABELS_KEPT = 100
"""Workflow names that are not registered in this process (runs of removed code) and get a series of their own."""

_REPEAT = re.compile(r":\d+$")


class CappedLabel:
    """The label value to export for a value: itself for the first ``kept`` values per scope, else :data:`OTHER`.

    ``declared(value)`` says whether the code declares a value; those pass
    whatever the count, and do not count. ``kept`` is an attribute so that
    tests can lower it.
    """

    def __init__(self, kept: int, declared: Callable[[str], bool] | None = None) -> None:
        self.kept = kept
        self._declared = declared
        # Per scope: the values given a series of their own, and how many of
        # them the code does not declare. Read and written by a worker's slot
        # threads and a web server's request threads alike: guarded by _lock.
        self._seen: dict[str, set[str]] = {}
        self._undeclared: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, value: str, scope: str = "") -> str:
        with self._lock:
            seen = self._seen.setdefault(scope, set())
            if value in seen:
                return value
            if self._declared is None or not self._declared(value):
                if self._undeclared.get(scope, 0) >= self.kept:
                    return OTHER
                self._undeclared[scope] = self._undeclared.get(scope, 0) + 1
            seen.add(value)
            return value

    def reset(self) -> None:
        """Forget the values seen (tests)."""
        with self._lock:
            self._seen.clear()
            self._undeclared.clear()


def _registered_workflow(name: str) -> bool:
    return any(spec.name == name for spec in registry.all())


def _declared_queue(queue: str) -> bool:
    return queue == DEFAULT_QUEUE or any(spec.queue == queue for spec in registry.all())


WORKFLOWS = CappedLabel(WORKFLOW_LABELS_KEPT, _registered_workflow)
QUEUES = CappedLabel(QUEUE_LABELS_KEPT, _declared_queue)
STEPS = CappedLabel(STEP_LABELS_KEPT)
SIGNALS = CappedLabel(SIGNAL_LABELS_KEPT)
CAPS = (WORKFLOWS, QUEUES, STEPS, SIGNALS)


def workflow_label(name: str) -> str:
    """The ``workflow`` label: the workflow's name, capped beyond the registered ones."""
    return WORKFLOWS(name)


def queue_label(queue: str) -> str:
    """The ``queue`` label: the queue's name, capped beyond the declared ones."""
    return QUEUES(queue)


def step_label(workflow: str, step: str) -> str:
    """The ``step`` label of a step's durable key: its name without the repeat counter, capped per workflow.

    ``workflow`` is the run's ``workflow`` label (so the runs of workflows
    beyond their own cap share one set of step names).
    """
    return STEPS(_REPEAT.sub("", step), scope=workflow)


def signal_label(workflow: str, signal: str) -> str:
    """The ``signal`` label: the signal's name, capped per workflow (``workflow`` is its label)."""
    return SIGNALS(signal, scope=workflow)
