"""The API's workers and queues: who serves each queue, and pausing and resuming one.

``GET workers`` and ``GET queues`` need the view (or change) permission on
workflow runs, ``POST queues/<name>/pause`` and ``.../resume`` the change
permission, as the admin's buttons and ``workflows queue pause`` do the same.
Authentication, CSRF and errors are ``views.endpoint``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from ..definitions.registry import registry
from ..store import workers
from . import fields
from .fields import ApiError, json_response
from .views import endpoint


def _no_parameters(request: HttpRequest) -> None:
    if request.GET:
        name = next(iter(request.GET))
        raise ApiError(400, "unknown_parameter", f"unknown parameter {name!r:.80}; this takes none", name)


def _overview(*also: str) -> list[workers.QueueInfo]:
    """Every queue in use, and ``also`` those (a queue just resumed may have no run and no worker)."""
    return workers.queue_overview([*(spec.queue for spec in registry.all()), *also])


@endpoint(GET="view")
def worker_list(request: HttpRequest) -> HttpResponse:
    """Every worker's heartbeat row: live ones first, then those that stopped or died lately."""
    _no_parameters(request)
    return json_response({"workers": [worker.as_dict() for worker in workers.workers()]})


@endpoint(GET="view")
def queue_list(request: HttpRequest) -> HttpResponse:
    """Every queue in use: due and running runs, paused or not, the live workers that serve it, unserved or not."""
    _no_parameters(request)
    return json_response({"queues": [queue.as_dict() for queue in _overview()]})


def _pause_view(pause: bool) -> Callable[..., HttpResponse]:
    @endpoint(POST="change")
    def view(request: HttpRequest, name: str) -> HttpResponse:
        queue = fields.queue(name, "name")
        assert queue is not None
        who = request.user.get_username() if request.user.is_authenticated else ""
        changed = workers.set_paused(queue, pause, f"API: {who}")
        state = next(found for found in _overview(queue) if found.name == queue)
        return json_response({"queue": state.as_dict(), "changed": changed})

    view.__name__ = view.__qualname__ = "queue_pause" if pause else "queue_resume"
    view.__doc__ = f"POST: {'pause' if pause else 'resume'} the queue (from the workers' next heartbeat)."
    return view


queue_pause, queue_resume = _pause_view(True), _pause_view(False)
