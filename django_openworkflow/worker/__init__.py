"""What a worker process runs: the claim loop, the slice runner, and the schedule and prune sweeps.

:class:`~.loop.Worker` is what ``manage.py runworkflows`` runs;
:mod:`.runner` is what every dispatcher (the worker's slots, a Celery task)
does with a run it claimed.
"""

from .loop import Worker, WorkerUnhealthy

__all__ = ["Worker", "WorkerUnhealthy"]
