"""Test settings for Celery worker subprocesses: tests.settings with Celery dispatch and a Redis broker."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import OPENWORKFLOW

# Database 5: kept apart from anything else using the local Redis; the tests flush it.
# Under pytest-xdist, worker gwN (and the subprocesses it starts, which inherit
# PYTEST_XDIST_WORKER) uses database 5 + N: one worker's flush empties no other's queue.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
CELERY_BROKER_URL = os.environ.get(
    "OWF_TEST_BROKER_URL", f"redis://127.0.0.1:6379/{5 + int(_XDIST_WORKER.removeprefix('gw'))}"
)
# Celery 6 stops retrying the first broker connection unless asked: say what we want.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Short leases so that runs of a killed worker are taken over quickly.
OPENWORKFLOW = {**OPENWORKFLOW, "DISPATCH": "celery", "LEASE": "2s"}
