"""Settings for the example project.

Configured from the environment with django-environ. ``DATABASE_URL`` picks
the database (e.g. ``postgres://user@host:5432/name``); without it a SQLite
file next to this module is used, set up so that workers and web processes
can share it.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent

env = environ.Env(
    DEBUG=(bool, True),
    SECRET_KEY=(str, "dev-only-insecure-secret-key-change-me"),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]"]),
    DATABASE_URL=(str, f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
)

SECRET_KEY = env("SECRET_KEY")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

INSTALLED_APPS = [
    # django-admin-interface: must come before django.contrib.admin.
    "admin_interface",
    "colorfield",
    # django.contrib.admin, with the Inbox's counts in the navigation ("Inbox (3, 1 overdue)").
    "django_openworkflow.admin_site.WorkflowAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_openworkflow",
    "example_project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # django-admin-interface's language chooser needs it.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, workers) write to one file: wait for the write
    # lock instead of failing, and let readers proceed during writes.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
# The languages django_openworkflow ships (its locale/ folder): what the language chooser offers.
LANGUAGES = [("en", "English"), ("fr", "Français")]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# django-admin-interface uses frames for its related-object modals.
X_FRAME_OPTIONS = "SAMEORIGIN"
SILENCED_SYSTEM_CHECKS = ["security.W019"]

OPENWORKFLOW = {
    "POLL_INTERVAL": "50ms",
    # How often the admin's run page, run list and dashboard refresh themselves (0: never).
    "ADMIN_LIVE_SECONDS": env.int("OPENWORKFLOW_ADMIN_LIVE_SECONDS", default=10),
    # Run workflows on Celery workers instead of `manage.py runworkflows`
    # (pip install "django-openworkflow[celery]" redis; see example_project/celery.py):
    # "DISPATCH": "celery",
}

# Celery: used only with "DISPATCH": "celery". Redis as the broker.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The sweep sends tasks for runs whose message was lost or never scheduled
# (a crashed worker's runs, long sleeps): it bounds how late they can be.
CELERY_BEAT_SCHEDULE = {
    "openworkflow-sweep": {"task": "django_openworkflow.sweep", "schedule": 10.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"simple": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "simple"}},
    "loggers": {
        "django_openworkflow": {"handlers": ["console"], "level": env("OPENWORKFLOW_LOG_LEVEL", default="INFO")},
    },
}
