"""Prometheus metrics (prometheus-client, the ``prometheus`` extra), on with ``OPENWORKFLOW["METRICS"] = True``.

Two kinds, kept apart so that nothing is counted twice:

- Counters and histograms (:mod:`.recorder`) count what happens in *this*
  process: runs started, finished and retried, step durations, signals sent.
  They are fed by the lifecycle hooks (:mod:`django_openworkflow.hooks`).
  With ``PROMETHEUS_MULTIPROC_DIR`` set, prometheus-client's multiprocess
  mode sums them over every process of the host that shares the directory.
- Gauges of the queue (:mod:`.collector`): due runs no worker has claimed,
  the oldest due run's age, runs in flight. They are read from the database
  when ``/metrics`` is scraped, so they are the same whoever serves them and
  whichever processes run.

Nothing here imports prometheus-client until :func:`enable` runs (the app's
``ready()`` calls it when the setting is on).
"""

from __future__ import annotations

import importlib.util
import threading

PROMETHEUS_EXTRA = "pip install 'django-openworkflow[prometheus]'"

_lock = threading.Lock()
_enabled = False


def available() -> bool:
    """Whether prometheus-client is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("prometheus_client") is not None
    except (ImportError, ValueError):  # a broken install, or blocked with sys.modules["prometheus_client"] = None
        return False


def is_enabled() -> bool:
    return _enabled


def enable() -> None:
    """Count this process's runs, steps and signals. Raises ``ImportError`` naming the extra when it is missing."""
    global _enabled
    with _lock:
        if _enabled:
            return
        if not available():
            raise ImportError(f"OPENWORKFLOW['METRICS'] needs prometheus-client: {PROMETHEUS_EXTRA}")
        from . import recorder

        recorder.connect()
        _enabled = True


def disable() -> None:
    """Stop counting (tests). The metrics keep the values they have."""
    global _enabled
    with _lock:
        if _enabled:
            from . import recorder

            recorder.disconnect()
        _enabled = False


def serve(port: int, address: str = "127.0.0.1") -> object:
    """Serve this process's counters and histograms over HTTP (a worker's own exporter); returns the server.

    In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``) it serves the sum over
    every process sharing the directory: run one per host. The database's
    gauges are left out (``/metrics`` has them: see :mod:`.collector`).
    Raises ``ImportError`` naming the extra when prometheus-client is missing.
    """
    enable()
    import os

    from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

    registry = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    server, _ = start_http_server(port, addr=address, registry=registry)
    return server
