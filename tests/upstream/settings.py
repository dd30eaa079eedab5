"""Settings of the upstream tasks tests (run_upstream_tasks.py): the suite's, with TASKS for the worker.

The tests override TASKS themselves; the ``runworkflows`` process reads
these: each alias the tests use is a WorkflowBackend, and a task is
attempted once, as Django's immediate backend does.
"""

from tests.settings import *  # noqa: F403

_ONCE = {"RETRY_POLICY": {"maximum_attempts": 1}}
TASKS = {
    alias: {"BACKEND": "tests.upstream.backends.ImmediateWorkflowBackend", "QUEUES": [], "OPTIONS": _ONCE}
    for alias in ("default", "immediate")
}
