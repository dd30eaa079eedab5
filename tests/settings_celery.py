"""Test settings for Celery worker subprocesses: tests.settings with Celery dispatch and a Redis broker."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import OPENWORKFLOW

# Database 5: kept apart from anything else using the local Redis; the tests flush it.
CELERY_BROKER_URL = os.environ.get("OWF_TEST_BROKER_URL", "redis://127.0.0.1:6379/5")
# Celery 6 stops retrying the first broker connection unless asked: say what we want.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Short leases so that runs of a killed worker are taken over quickly.
OPENWORKFLOW = {**OPENWORKFLOW, "DISPATCH": "celery", "LEASE": "2s"}
