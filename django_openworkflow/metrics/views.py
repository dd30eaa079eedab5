"""``/metrics``: the Prometheus exposition of the workflow metrics (prometheus-client, the ``prometheus`` extra).

Who may read it: everyone, unless ``OPENWORKFLOW["METRICS_TOKEN"]`` is
set; then a request needs ``Authorization: Bearer <token>`` (what
Prometheus sends with ``authorization: {credentials: <token>}``) or a
logged-in staff user's session.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache

from ..conf import owf_settings
from . import PROMETHEUS_EXTRA, available

TEXT = "text/plain; charset=utf-8"


@never_cache
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not available():
        return HttpResponse(
            "Workflow metrics need prometheus-client, which is not installed: "
            f"{PROMETHEUS_EXTRA}, then set OPENWORKFLOW['METRICS'] = True.\n",
            status=501,
            content_type=TEXT,
        )
    if not owf_settings.metrics:
        return HttpResponse(
            "Workflow metrics are off: set OPENWORKFLOW['METRICS'] = True.\n", status=404, content_type=TEXT
        )
    if not _allowed(request, owf_settings.metrics_token):
        response = HttpResponse(
            "Workflow metrics need 'Authorization: Bearer <OPENWORKFLOW[\"METRICS_TOKEN\"]>' or a staff login.\n",
            status=401,
            content_type=TEXT,
        )
        response["WWW-Authenticate"] = 'Bearer realm="workflow metrics"'
        return response
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_registry()), content_type=content_type)


def _allowed(request: HttpRequest, token: str | None) -> bool:
    if token is None:
        return True
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


def _registry() -> Any:
    """This process's metrics (or, in multiprocess mode, the host's) and the database's gauges."""
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.registry import Collector

    from .collector import DatabaseCollector

    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:

        class ThisProcess(Collector):
            def collect(self) -> Iterator[Any]:
                yield from REGISTRY.collect()

        registry.register(ThisProcess())
    registry.register(DatabaseCollector())
    return registry
