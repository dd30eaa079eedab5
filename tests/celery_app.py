"""The Celery app of the test suite: `celery -A tests.celery_app worker` and the test process.

Configured from tests/settings_celery.py (the module itself, not
``django.conf:settings``) so that the pytest process, whose Django settings
are tests.settings, sends to the same broker as the worker subprocesses.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings_celery")

# django_openworkflow.dispatch.celery is also loaded by the app's ready() when DISPATCH = "celery".
app = Celery("tests", include=["django_openworkflow.dispatch.celery", "tests.celery_workflows"])
app.config_from_object("tests.settings_celery", namespace="CELERY")
