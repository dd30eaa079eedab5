"""The backend interface: every operation, written once on the hooks of ``store/core.py``."""

from __future__ import annotations

from ..messages import MessageOps
from ..queue import QueueOps
from ..runs import RunOps
from ..waits import WaitOps


class Backend(QueueOps, RunOps, WaitOps, MessageOps):
    """Every store operation for one database alias.

    The operations, by who calls them:

    - workers and dispatchers (``queue.py``): :meth:`claim`, :meth:`claim_run`,
      :meth:`extend_leases`, :meth:`release`, :meth:`due_runs`,
      :meth:`due_children`, :meth:`dispatch_state`;
    - the engine, fenced on the worker holding the run (``journal.py``, on
      ``fence.py``): :meth:`load_history`, :meth:`record_step`, :meth:`park`,
      :meth:`complete_run`, :meth:`fail_run`, :meth:`reschedule_run`,
      :meth:`run_outcome`, :meth:`run_status`; and waits and atomic steps
      (``waits.py``): :meth:`wait_for_delivery`, :meth:`expire_wait`,
      :meth:`atomic_step`;
    - the client, CLI and admin (``runs.py``, ``messages.py``):
      :meth:`insert_run`, :meth:`get_run`, :meth:`cancel_runs`,
      :meth:`wake_run`, :meth:`retry_failed_run`, :meth:`send_signal`,
      :meth:`send_event`, :meth:`parent_run_id`, :meth:`child_run_ids`,
      and :meth:`approval`, :meth:`run_approvals`, :meth:`decide_approval`,
      :meth:`submit_task` (``approvals.py``, below ``waits.py``).

    Subclasses per database override the hooks of
    :class:`~django_openworkflow.store.core.BackendCore` and, where their
    database does it in fewer round trips, an operation's private step.
    """

    #: Workers on this store keep a heartbeat row in ``openworkflow_worker`` (and read paused queues there).
    keeps_worker_rows = True
