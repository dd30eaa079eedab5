"""Django settings for the benchmarks (``python bench/run.py`` and its subprocesses).

The database is picked by ``BENCH_DB`` (set by ``bench/run.py --db``):

* ``postgres`` (default): ``BENCH_DATABASE_URL``, default
  ``postgres://postgres@127.0.0.1:5432/bench_django``.
* ``sqlite``: ``bench/bench.sqlite3`` with the settings the design recommends
  for several processes sharing one file (WAL, busy timeout, IMMEDIATE).
* ``mariadb``: ``BENCH_MARIADB_URL``, default
  ``mysql://root@127.0.0.1:3306/bench_django``, with utf8mb4 and READ COMMITTED
  (what the package requires on MariaDB/MySQL; options in the URL win).
"""

import os
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "bench-only-not-secret"
DEBUG = False  # DEBUG=True keeps every query in memory: it would distort memory and speed.
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS: list[str] = []

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_openworkflow",
    "bench.benchapp",
]

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/bench_django"
DEFAULT_MARIADB_URL = "mysql://root@127.0.0.1:3306/bench_django"
MARIADB_OPTIONS = {"charset": "utf8mb4", "isolation_level": "read committed"}
SQLITE_PATH = Path(os.environ.get("BENCH_SQLITE_PATH", BASE_DIR / "bench.sqlite3"))
SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}

BENCH_DB = os.environ.get("BENCH_DB", "postgres")
if BENCH_DB == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(SQLITE_PATH),
            "OPTIONS": SQLITE_OPTIONS,
        }
    }
elif BENCH_DB == "postgres":
    DATABASES = {"default": env.db_url("BENCH_DATABASE_URL", default=DEFAULT_DATABASE_URL)}
    # Lets the orchestrator tell its own connections from the worker's in pg_stat_activity.
    DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = os.environ.get("BENCH_APP_NAME", "owf-bench")
    # OWF_BENCH_NO_PREPARE=1: the engine's statements unprepared (what OPTIONS["prepare_threshold"] = None
    # does behind an old PgBouncer), to price preparing them.
    if os.environ.get("OWF_BENCH_NO_PREPARE"):
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None
elif BENCH_DB == "mariadb":
    DATABASES = {"default": env.db_url("BENCH_MARIADB_URL", default=DEFAULT_MARIADB_URL)}
    DATABASES["default"]["OPTIONS"] = {**MARIADB_OPTIONS, **DATABASES["default"].get("OPTIONS", {})}
else:
    raise RuntimeError(f"BENCH_DB must be 'postgres', 'sqlite' or 'mariadb', got {BENCH_DB!r}")

OPENWORKFLOW = {
    "POLL_INTERVAL": "100ms",
    # bench-long runs 1,000 steps; keep the per-run cap out of the way.
    "MAX_STEP_ATTEMPTS": 5000,
    # bench/phases/fairness.py's queue (its workflow declares a fairness key); the phase sets it per measurement.
    "FAIR_QUEUES": ["bench-fair"],
}

# Payloads' stored form, to price it (bench/phases/payloads.py, bench/phases/rotation.py): OWF_BENCH_KEYS, Fernet
# keys separated by commas (PAYLOAD_ENCRYPTION); OWF_BENCH_COMPRESSION, a size in bytes (PAYLOAD_COMPRESSION);
# OWF_BENCH_OFFLOAD_DIR and OWF_BENCH_OFFLOAD, a directory and a size in bytes (PAYLOAD_OFFLOAD to a file storage).
if os.environ.get("OWF_BENCH_KEYS"):
    OPENWORKFLOW["PAYLOAD_ENCRYPTION"] = os.environ["OWF_BENCH_KEYS"].split(",")
if os.environ.get("OWF_BENCH_COMPRESSION"):
    OPENWORKFLOW["PAYLOAD_COMPRESSION"] = int(os.environ["OWF_BENCH_COMPRESSION"])
if os.environ.get("OWF_BENCH_OFFLOAD_DIR"):
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        "payloads": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": os.environ["OWF_BENCH_OFFLOAD_DIR"]},
        },
    }
    OPENWORKFLOW["PAYLOAD_OFFLOAD"] = {"STORAGE": "payloads", "THRESHOLD": int(os.environ.get("OWF_BENCH_OFFLOAD", 1))}

# OWF_BENCH_TELEMETRY=1: metrics and tracing on, spans recorded by the SDK (and dropped), to price them;
# =metrics: metrics only.
if os.environ.get("OWF_BENCH_TELEMETRY") == "metrics":
    OPENWORKFLOW["METRICS"] = True
elif os.environ.get("OWF_BENCH_TELEMETRY"):
    OPENWORKFLOW.update(METRICS=True, TRACING=True)
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class _Dropped(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    _provider = TracerProvider()
    _provider.add_span_processor(BatchSpanProcessor(_Dropped()))
    trace.set_tracer_provider(_provider)

# Quiet: warnings and errors only (a per-run INFO line would cost time and fill the logs).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
    "loggers": {
        "django_openworkflow": {"handlers": [], "level": os.environ.get("BENCH_LOG_LEVEL", "WARNING")},
    },
}
