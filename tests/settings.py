"""Settings for the test suite: SQLite by default, else the database DATABASE_URL names.

DATABASE_URL may be a PostgreSQL (postgres://) or a MySQL/MariaDB (mysql://) URL.
"""

import json
import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Django's advice for test speed: the default hasher (PBKDF2, a million rounds) costs about
# half a second of CPU per user created with a password, and the admin and API tests create
# a user each. No test here is about password hashing.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_openworkflow",
    "tests.fixtures.testapp",
    "tests.fixtures.flowapp",
    "tests.fixtures.languageapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
# The live server (tests/api/test_views.py's real HTTP test) serves static files under this prefix.
STATIC_URL = "/static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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

SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

if os.environ.get("DATABASE_URL"):
    DATABASES = {"default": env.db("DATABASE_URL")}
    if DATABASES["default"]["ENGINE"].endswith("backends.mysql"):  # MySQL or MariaDB
        # utf8mb4: payloads hold any Unicode (MySQL's "utf8" stops at 3 bytes).
        # READ COMMITTED, as on PostgreSQL (Django's default too, said explicitly):
        # InnoDB's own REPEATABLE READ keeps a transaction on its first snapshot.
        # Options given in the URL (?charset=...) still win.
        DATABASES["default"]["OPTIONS"] = {
            "charset": "utf8mb4",
            "isolation_level": "read committed",
            **DATABASES["default"].get("OPTIONS", {}),
        }
        # The server's default collation (case-insensitive): migration 0005 must make
        # names and keys compare byte for byte, and the tests check that it does.
        DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4"}
else:
    # A file, not :memory:, so that worker subprocesses share the test database.
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(BASE_DIR / "db.sqlite3"),
            "OPTIONS": SQLITE_OPTIONS,
            "TEST": {"NAME": os.environ.get("OWF_SQLITE_TEST_NAME", f"/tmp/owf-test-{os.getpid()}.sqlite3")},
        }
    }


def _other_name(default_name: str) -> str:
    """The "other" alias's database name, made from the default alias's (test or not)."""
    if default_name.endswith(".sqlite3"):
        return default_name.replace(".sqlite3", "-other.sqlite3")
    return f"{default_name}_other"


# A second alias on the same server, for the tests that put the workflow tables
# on an alias of their own (OPENWORKFLOW["DATABASE"]). Tests ask for it with
# django_db(databases=[...]); only they create its test database (and, with
# OWF_TEST_WORKFLOW_DATABASE=other, conftest.py makes every test ask for it).
DATABASES["other"] = {
    **DATABASES["default"],
    "NAME": _other_name(str(DATABASES["default"]["NAME"])),
    "TEST": {
        **DATABASES["default"].get("TEST", {}),
        # Django names a test database "test_" + NAME unless told otherwise.
        "NAME": _other_name(DATABASES["default"].get("TEST", {}).get("NAME") or f"test_{DATABASES['default']['NAME']}"),
    },
}

# Worker subprocesses started by the tests connect to the test databases by name:
# the default alias's is given, the other alias's is named after it.
if os.environ.get("OWF_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["OWF_TEST_DB_NAME"]
    DATABASES["other"]["NAME"] = _other_name(os.environ["OWF_TEST_DB_NAME"])

# The queue "tenants" is claimed fairly (tests/store/test_fairness.py, the flowapp tenant workflow).
# A quantum of an hour: places in line depend on the order of the starts, never on how long a loaded
# machine took between them (with 1 s, a start a second late lands a turn later).
OPENWORKFLOW: dict[str, object] = {"POLL_INTERVAL": "20ms", "FAIR_QUEUES": ["tenants"], "FAIRNESS_QUANTUM": "1h"}
# Worker subprocesses of tests/worker/test_prune.py sweep often.
if os.environ.get("OWF_TEST_PRUNE_INTERVAL"):
    OPENWORKFLOW["PRUNE_INTERVAL"] = os.environ["OWF_TEST_PRUNE_INTERVAL"]
# tests/metrics/test_metrics.py's worker subprocesses count what they do (the in-process tests enable it themselves).
if os.environ.get("OWF_TEST_PRIORITY_AGING"):  # JSON, for worker processes (tests/worker/test_aging.py)
    OPENWORKFLOW["PRIORITY_AGING"] = json.loads(os.environ["OWF_TEST_PRIORITY_AGING"])

if os.environ.get("OWF_TEST_TASK_TIMERS_INTERVAL"):  # worker processes (tests/worker/test_task_timers.py)
    OPENWORKFLOW["TASK_TIMERS_INTERVAL"] = os.environ["OWF_TEST_TASK_TIMERS_INTERVAL"]
if os.environ.get("OWF_TEST_NOTIFY_FILE"):  # what APPROVAL_NOTIFY was called with, one JSON line each
    OPENWORKFLOW["APPROVAL_NOTIFY"] = "tests.fixtures.testapp.notify.record"

if os.environ.get("OWF_TEST_METRICS"):
    OPENWORKFLOW["METRICS"] = True

# OWF_TEST_WORKFLOW_DATABASE=other (`make test-second-db`): the whole suite with
# the workflow tables on that alias only, as the README tells users to set it up.
WORKFLOW_DATABASE = os.environ.get("OWF_TEST_WORKFLOW_DATABASE", "")
if WORKFLOW_DATABASE:
    if WORKFLOW_DATABASE not in DATABASES:
        raise ValueError(f"OWF_TEST_WORKFLOW_DATABASE={WORKFLOW_DATABASE!r} is not an alias of tests/settings.py")
    OPENWORKFLOW["DATABASE"] = WORKFLOW_DATABASE
    DATABASE_ROUTERS = ["django_openworkflow.routers.WorkflowRouter"]
    # Read and understood (tests/test_routers.py tests it): not printed by every command.
    SILENCED_SYSTEM_CHECKS = ["openworkflow.W030"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_openworkflow": {"handlers": ["console"], "level": os.environ.get("OWF_LOG_LEVEL", "WARNING")}},
}
