"""The example project's Celery app, for ``OPENWORKFLOW["DISPATCH"] = "celery"``.

Start a worker (with an embedded beat for the sweep) instead of
``manage.py runworkflows``::

    celery -A example_project worker --queues workflows --beat --loglevel INFO

Settings come from Django's settings, prefixed ``CELERY_`` (``CELERY_BROKER_URL``).
django_openworkflow registers its tasks itself when DISPATCH is "celery".
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
