"""Dispatchers: how started and due runs reach whatever executes them. The database stays the source of truth.

``OPENWORKFLOW["DISPATCH"]`` names a :class:`Dispatcher` subclass by dotted
path: ``"worker"`` (the default, :class:`WorkerDispatcher`) or ``"celery"``
(:mod:`.celery`). The base class lives with the client that calls it
(``client/dispatcher.py``); the executors here sit above the worker.
"""

from ..client.dispatcher import SHORT_NAMES, Dispatcher, WorkerDispatcher, dispatcher_path, get_dispatcher

__all__ = ["SHORT_NAMES", "Dispatcher", "WorkerDispatcher", "dispatcher_path", "get_dispatcher"]
