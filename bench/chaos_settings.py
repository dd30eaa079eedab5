"""Settings for bench/chaos.py: the bench settings, the chaos app, its own database.

Every process names itself ``chaos-pid-<pid>`` to PostgreSQL, so triggers can
tell which worker process wrote what.
"""

import os

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, INSTALLED_APPS, env

INSTALLED_APPS = [*INSTALLED_APPS, "bench.chaosapp"]
DATABASES["default"] = env.db_url("CHAOS_DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/bench_chaos")
DATABASES["default"].setdefault("OPTIONS", {})["application_name"] = f"chaos-pid-{os.getpid()}"
