#!/usr/bin/env bash
# Proves that a bare `pip install django-openworkflow` (no extras: no psycopg,
# no Celery, no mysqlclient, no croniter) works on SQLite: a new project migrates, runs a
# workflow with the worker, shows it in the admin, and never imports a driver
# it did not ask for. Needs python3 and PyPI (for Django); no database server.
#
#   .ci/bare_install.sh        prints "bare install: ok" last, or fails
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
# Only Django's own SQLite settings: nothing from the caller's environment.
unset DATABASE_URL MARIADB_URL DJANGO_SETTINGS_MODULE PYTHONPATH VIRTUAL_ENV \
    OPENWORKFLOW_REQUIRE_POSTGRES OPENWORKFLOW_REQUIRE_MARIADB
export PIP_DISABLE_PIP_VERSION_CHECK=1

work="$(mktemp -d "${TMPDIR:-/tmp}/owf-bare.XXXXXX")"
trap 'rm -rf "$work"' EXIT

step() { printf '==> %s\n' "$*"; }
fail() { echo "bare install: FAILED: $*" >&2; exit 1; }

step "fresh venv ($("$PYTHON" --version 2>&1))"
"$PYTHON" -m venv "$work/venv" || fail "could not create a venv with $PYTHON"
py="$work/venv/bin/python"

# Build from a copy of the files git knows (tracked or new, not ignored), so that
# the repo gets no build/ directory and the wheel no stale files from an old one.
step "build the wheel"
mkdir "$work/src"
git -C "$REPO" ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do if [ -e "$REPO/$f" ]; then printf '%s\0' "$f"; fi; done |
    tar -C "$REPO" --null -T - -cf - | tar -C "$work/src" -xf - \
    || fail "could not copy the sources of $REPO (not a git checkout?)"
"$py" -m pip wheel -q --no-deps -w "$work/dist" "$work/src" || fail "pip wheel"
wheels=("$work"/dist/django_openworkflow-*.whl)
[ -f "${wheels[0]}" ] || fail "no wheel in $work/dist"

step "pip install $(basename "${wheels[0]}")"
"$py" -m pip install -q "${wheels[0]}" || fail "pip install of the wheel"
# A bare install pulls Django alone: an optional driver here would hide the bug this checks for.
"$py" - <<'EOF' || fail "the bare install pulled in optional packages"
import importlib.util, sys
extra = [
    m
    for m in ("psycopg", "psycopg2", "celery", "MySQLdb", "croniter", "prometheus_client", "opentelemetry", "cryptography")
    if importlib.util.find_spec(m)
]
sys.exit(f"installed without being asked for: {', '.join(extra)}" if extra else 0)
EOF

step "new project: django-admin startproject mysite, startapp shop"
cd "$work"
"$work/venv/bin/django-admin" startproject mysite || fail "django-admin startproject"
cd mysite
"$py" manage.py startapp shop || fail "manage.py startapp"
cat >shop/workflows.py <<'EOF'
from django_openworkflow import workflow


@workflow(name="hello")
def hello(ctx):
    return ctx.step.run("greet", lambda: {"hi": ctx.input["name"]})
EOF
cat >>mysite/settings.py <<'EOF'

INSTALLED_APPS += ["django_openworkflow", "shop"]
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]
# One process at a time here, so the default SQLite settings do: W001 would only fill the log.
SILENCED_SYSTEM_CHECKS = ["openworkflow.W001"]
EOF

step "manage.py migrate"
"$py" manage.py migrate --noinput -v 0 || fail "manage.py migrate"
step "manage.py check"
"$py" manage.py check || fail "manage.py check"

step "manage.py workflows start hello"
started="$("$py" manage.py workflows start hello --input '{"name": "x"}' --json)" \
    || fail "manage.py workflows start"
run_id="$("$py" -c 'import json, sys; print(json.load(sys.stdin)["id"])' <<<"$started")" \
    || fail "workflows start --json printed no run id: $started"

step "manage.py runworkflows --burst"
"$py" manage.py runworkflows --burst || fail "manage.py runworkflows --burst"

step "manage.py workflows show $run_id"
shown="$("$py" manage.py workflows show "$run_id" --json)" || fail "manage.py workflows show"
"$py" - "$shown" <<'EOF' || fail "the run did not complete"
import json, sys
run = json.loads(sys.argv[1])  # show --json prints the run object (the API's shape)
if run["status"] != "completed" or run.get("output") != {"hi": "x"}:
    sys.exit(f"run {run['id']} is {run['status']} with output {run.get('output')!r}, not completed with hi=x")
EOF

# One process for the admin, an in-process worker and the import check, so the
# check covers everything that process did.
step "admin pages, an in-process worker, and no optional driver imported"
RUN_ID="$run_id" "$py" manage.py shell -v 0 -c "$(cat <<'EOF'
import os, sys

from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from django_openworkflow.worker import Worker
from shop.workflows import hello

run_id = os.environ["RUN_ID"]
user = get_user_model().objects.create_superuser("admin", "admin@example.com", "not-a-secret")
client = Client()
client.force_login(user)
for url in (
    reverse("admin:django_openworkflow_workflowrun_changelist"),
    reverse("admin:django_openworkflow_workflowrun_change", args=[run_id]),
):
    response = client.get(url)
    if response.status_code != 200:
        sys.exit(f"GET {url}: status {response.status_code}, not 200")
    if run_id not in response.content.decode():
        sys.exit(f"GET {url}: run {run_id} is not on the page")

handle = hello.run({"name": "y"})
Worker(burst=True).run(install_signal_handlers=False)
run = handle.fetch()
if run.status != "completed" or run.output != {"hi": "y"}:
    sys.exit(f"in-process worker: run {run.id} is {run.status} with output {run.output!r}")

# /metrics without prometheus-client: a 501 that names the extra.
from django.test import RequestFactory
from django_openworkflow.metrics.views import metrics_view

response = metrics_view(RequestFactory().get("/metrics"))
if response.status_code != 501 or b"django-openworkflow[prometheus]" not in response.content:
    sys.exit(f"/metrics without prometheus-client: status {response.status_code}, {response.content[:200]!r}")

optional = ("psycopg", "psycopg2", "celery", "MySQLdb", "croniter", "prometheus_client", "opentelemetry", "cryptography")
leaked = [m for m in optional if m in sys.modules]
if leaked:
    sys.exit(f"imported optional packages: {', '.join(leaked)}")
EOF
)" || fail "admin, in-process worker or import check"

echo "bare install: ok"
