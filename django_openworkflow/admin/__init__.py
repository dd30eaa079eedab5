"""The Django admin for workflow runs, split by job.

``options`` holds the ModelAdmin (its URLs and views) and wires the rest:
``changelist`` (the run list), ``run_page``, ``journal`` and ``timeline``
(a run's page), ``forms`` (start a run, send a signal), ``actions`` (cancel,
retry, re-run, on :mod:`django_openworkflow.client.operations`), ``responses`` and
``markup`` (what every page shares). ``approvals`` (the Inbox), ``schedules``, ``tokens`` (the
HTTP API's) and ``workers`` (the Workers page, with the queues) have
ModelAdmins of their own. Importing this package registers the ModelAdmin,
which is what Django's admin autodiscovery does.
"""

from . import options  # noqa: F401  (registers WorkflowRunAdmin)
from .approvals import ApprovalAdmin  # noqa: F401  (registers it: the Inbox)
from .schedules import ScheduleAdmin  # noqa: F401  (registers it)
from .tokens import ApiTokenAdmin  # noqa: F401  (registers it)
from .workers import WorkerProcessAdmin  # noqa: F401  (registers it)
