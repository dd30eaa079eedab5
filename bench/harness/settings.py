"""Settings of the harness adapter and of the ``runworkflows`` processes it starts.

The harness names the database in ``DATABASE_URL`` (a PostgreSQL URL); the
rest is what a project would deploy: the package's defaults, DEBUG off; priority aging
when the harness asks for it (its PRIORITY_AGING_MS, phase E).
"""

import os

import environ

SECRET_KEY = "harness-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_openworkflow", "bench.harness"]
DATABASES = {"default": environ.Env.db_url_config(os.environ["DATABASE_URL"])}
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = os.environ.get(
    "OWF_HARNESS_APP_NAME", "owf-harness"
)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
    "loggers": {"django_openworkflow": {"handlers": ["stderr"], "level": "WARNING"}},
}
# The harness's PRIORITY_AGING_MS (phase E; awa ages a job one level per 60 s by default): one level of
# ours per that interval (whole seconds, at least 1), up to 3, the harness's priority 1 (workflows.py).
if os.environ.get("PRIORITY_AGING_MS", "").strip():
    OPENWORKFLOW = {
        "PRIORITY_AGING": {"every": f"{max(1, round(int(os.environ['PRIORITY_AGING_MS']) / 1000))}s", "ceiling": 3}
    }
