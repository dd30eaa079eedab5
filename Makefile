# Developer tasks. Needs only python3: everything else goes into .venv.
#
#   make demo              run the example workflow end to end (SQLite by default); installs only
#                          what the example project needs (the [example] extra), not the dev tools
#   make demo-admin        the demo's runs in the example project's admin: creates a superuser
#                          (asks once) and serves http://127.0.0.1:8000/admin/
#   make messages          recompile the translations (needs GNU gettext's msgfmt; the .mo files are committed)
#   make screenshots       refresh the docs' pictures (docs/*.png) from the browser test's themed admin
#   make test              pytest on SQLite, then on PostgreSQL if DATABASE_URL is set,
#                          then on MariaDB if MARIADB_URL is set (installs the [mysql] extra);
#                          each in PYTEST_WORKERS processes (default: two per core, at most 8; 0: one process);
#                          PG_BIN and PG_ENV run the PostgreSQL leg in another environment and mode (as CI does)
#   make test-second-db    pytest with the workflow tables on a database alias of their own
#                          ("other", with the shipped router): SQLite, then PostgreSQL if DATABASE_URL is set
#   make lint              ruff, mypy and the import contracts (.importlinter)
#   make docs              the docs site (Sphinx, warnings are errors) in docs/_build/html
#   make dist              the sdist and the wheel in dist/ (python -m build), checked by twine check
#   make migrations-check  fail if models and migrations disagree
#   make tox TOX_ARGS="-e py312-django60-sqlite"
#   make test-upstream     Django's own tests/tasks against the Tasks backend (Django 6: UPSTREAM_PYTHON=...)

PYTHON ?= python3
# Bytecode cached in __pycache__ even where the shell says not to (some CI images and containers set
# PYTHONDONTWRITEBYTECODE=1): without it every pytest process and manage.py subprocess compiles the
# package, and rewrites the tests' assertions, anew: the SQLite leg took 407 s instead of 365 s
# on a 2-core machine (2026-11-30).
unexport PYTHONDONTWRITEBYTECODE
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The demo's own, smaller install: Django and the example project's theme, no test or lint tools.
DEMO_STAMP := $(VENV)/.installed-demo
PYTEST_ARGS ?=
# pytest-xdist processes per pytest run (PYTEST_WORKERS=0 runs in one process). Two per core: a third
# of the suite's time is spent waiting on worker subprocesses, servers and timers, and with one process
# per core the cores were idle that third of the time (2 cores: 222 s of pytest at 67 % busy, 184 s
# at 93 % with four). At most 8: each process holds its own test databases and connections.
# worksteal: an idle process takes queued tests from a busy one (a few tests take 5-15 s).
# conftest.py gives each its own test databases and Redis database.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(min(8, 2 * (os.cpu_count() or 1)))')
# --durations=5: each leg names its slowest tests (CI's summary repeats them).
PYTEST_OPTIONS := -n $(PYTEST_WORKERS) --dist worksteal --durations=5
PYTEST := $(BIN)/pytest $(PYTEST_OPTIONS)
TOX_ARGS ?=

# A leg's start and its end line ("==> the SQLite leg took 95 s"), which CI's summary repeats.
LEG_START = started=$$(date +%s)
LEG_END = echo "==> the $(1) leg took $$(( $$(date +%s) - started )) s"
# A database's second and later legs (OWF_TEST_SCOPE=database) run only the tests that reach the
# database: the others ran on the SQLite leg, the same on every database (tests/conftest.py).
SCOPED = OWF_TEST_SCOPE=database
# The PostgreSQL leg: the environment whose pytest runs it (PG_BIN) and its mode (PG_ENV). By default
# .venv's (Django 5.2) and the tests that reach the database. .ci/run gives it the Django 6 tox env
# and the workflow tables on an alias of their own, every test: one leg also tests Django 6 and the
# second alias, where a leg of their own cost CI a quarter of its time.
PG_BIN ?= $(BIN)
PG_ENV ?= $(SCOPED)

# $(call require,FLAG,URL,example): fail when the environment requires a database (FLAG) but names none (URL).
require = @if [ -n "$$$(1)" ] && [ -z "$$$(2)" ]; then \
	echo "error: $(1) is set but $(2) is not; set $(2)=$(3)" >&2; exit 1; fi

# A database URL (on stdin) with any password replaced by ***, for printing.
MASK_PASSWORD = sed -E 's|(//[^:/@]*):[^@]*@|\1:***@|'

.PHONY: help venv .venv demo demo-admin messages screenshots test test-second-db test-upstream lint docs dist migrations-check tox clean distclean

help:
	@awk '/^#/ { sub(/^# ?/, ""); print; next } { exit }' Makefile

venv .venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

$(DEMO_STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[example]"
	touch $@

demo: $(DEMO_STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo

# A superuser only when there is none (createsuperuser asks for a name and a password).
demo-admin: $(DEMO_STAMP)
	$(BIN)/python manage.py migrate --noinput
	@$(BIN)/python manage.py shell -v 0 -c \
		"from django.contrib.auth import get_user_model; import sys; \
		sys.exit(0 if get_user_model().objects.filter(is_superuser=True).exists() else 1)" \
		|| $(BIN)/python manage.py createsuperuser
	@echo "==> the demo's runs: http://127.0.0.1:8000/admin/django_openworkflow/workflowrun/"
	$(BIN)/python manage.py runserver 127.0.0.1:8000

# The browser test (Debian's chromium, the example project's themed admin) copies the docs' pictures to docs/.
screenshots: $(STAMP)
	OPENWORKFLOW_SCREENSHOTS=docs $(BIN)/pytest -q tests/admin/test_browser.py tests/admin/test_browser_fromstep.py \
		tests/admin/test_browser_workers.py tests/admin/test_browser_approvals.py tests/admin/test_browser_tasks.py

# The translations: django.po (edited by hand or with makemessages) -> django.mo, which is committed.
messages: $(DEMO_STAMP)
	cd django_openworkflow && ../$(BIN)/django-admin compilemessages

# Each run carries only its own OPENWORKFLOW_REQUIRE_* variable: conftest.py checks
# it against the database the run is on. mysqlclient is installed on first use only:
# it needs a C compiler, and SQLite must keep working with nothing but python3.
test: $(STAMP)
	$(call require,OPENWORKFLOW_REQUIRE_POSTGRES,DATABASE_URL,postgres://user@host:5432/dbname)
	$(call require,OPENWORKFLOW_REQUIRE_MARIADB,MARIADB_URL,mysql://user@host:3306/dbname)
	@status=0; \
	echo "==> pytest on SQLite: every test"; $(LEG_START); \
	env -u DATABASE_URL -u OPENWORKFLOW_REQUIRE_POSTGRES -u OPENWORKFLOW_REQUIRE_MARIADB \
		$(PYTEST) $(PYTEST_ARGS) || status=1; \
	$(call LEG_END,SQLite); \
	if [ -n "$$DATABASE_URL" ]; then \
		echo "==> pytest on PostgreSQL, Django $$($(PG_BIN)/python -m django --version), $(PG_ENV):" \
		     "$$(printf '%s' "$$DATABASE_URL" | $(MASK_PASSWORD))"; $(LEG_START); \
		env -u OPENWORKFLOW_REQUIRE_MARIADB $(PG_ENV) $(PG_BIN)/pytest $(PYTEST_OPTIONS) $(PYTEST_ARGS) || status=1; \
		$(call LEG_END,PostgreSQL); \
	else \
		echo "==> DATABASE_URL is not set: skipping the PostgreSQL run"; \
	fi; \
	if [ -n "$$MARIADB_URL" ]; then \
		echo "==> pytest on MariaDB, the tests that reach the database:" \
		     "$$(printf '%s' "$$MARIADB_URL" | $(MASK_PASSWORD))"; \
		if $(BIN)/python -c 'import MySQLdb' 2>/dev/null || { \
			echo "==> installing the [mysql] extra (mysqlclient needs pkg-config and libmariadb-dev)"; \
			$(BIN)/python -m pip install -q -e ".[mysql]"; }; then \
			$(LEG_START); \
			env -u OPENWORKFLOW_REQUIRE_POSTGRES DATABASE_URL="$$MARIADB_URL" $(SCOPED) \
				$(PYTEST) $(PYTEST_ARGS) || status=1; \
			$(call LEG_END,MariaDB); \
		else \
			echo "error: could not install mysqlclient: the MariaDB run did not run" >&2; status=1; \
		fi; \
	else \
		echo "==> MARIADB_URL is not set: skipping the MariaDB run"; \
	fi; \
	exit $$status

# OWF_TEST_WORKFLOW_DATABASE=other: tests/settings.py sets OPENWORKFLOW["DATABASE"] and
# DATABASE_ROUTERS, conftest.py lets every database test use both aliases.
test-second-db: $(STAMP)
	$(call require,OPENWORKFLOW_REQUIRE_POSTGRES,DATABASE_URL,postgres://user@host:5432/dbname)
	@status=0; \
	echo "==> pytest on SQLite, the workflow tables on the alias \"other\""; \
	env -u DATABASE_URL -u OPENWORKFLOW_REQUIRE_POSTGRES -u OPENWORKFLOW_REQUIRE_MARIADB \
		OWF_TEST_WORKFLOW_DATABASE=other $(PYTEST) $(PYTEST_ARGS) || status=1; \
	if [ -n "$$DATABASE_URL" ]; then \
		echo "==> pytest on PostgreSQL, the workflow tables on the alias \"other\":" \
		     "$$(printf '%s' "$$DATABASE_URL" | $(MASK_PASSWORD))"; \
		env -u OPENWORKFLOW_REQUIRE_MARIADB OWF_TEST_WORKFLOW_DATABASE=other \
			$(PYTEST) $(PYTEST_ARGS) || status=1; \
	else \
		echo "==> DATABASE_URL is not set: skipping the PostgreSQL run"; \
	fi; \
	exit $$status

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html
	@echo "==> docs/_build/html/index.html"

# Built as a release would be: the sdist first, then the wheel from the sdist, each in an isolated
# environment with the build requirements of pyproject.toml (fetched from the package index).
# tests/test_release.py checks what they contain.
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy django_openworkflow
	$(BIN)/lint-imports --no-logo --no-cache

migrations-check: $(STAMP)
	$(BIN)/python -m django makemigrations --check --dry-run --settings=tests.settings

# tox.ini's commands read PYTEST_WORKERS (tox alone: one process per core).
tox: $(STAMP)
	PYTEST_WORKERS=$(PYTEST_WORKERS) $(BIN)/tox $(TOX_ARGS)

# Django's own tests/tasks against WorkflowBackend with a runworkflows worker
# (tests/upstream/run_upstream_tasks.py): needs Django 6, for example
# UPSTREAM_PYTHON=.tox/py312-django60-postgres/bin/python. SQLite, then
# PostgreSQL when DATABASE_URL is set, MariaDB when MARIADB_URL is (mysqlclient
# is installed into UPSTREAM_PYTHON's environment if missing). First, on .venv's
# Django 5.2, what the installed backport's sdist holds to run.
UPSTREAM_PYTHON ?= $(BIN)/python
test-upstream: $(STAMP)
	@status=0; \
	if [ "$(UPSTREAM_PYTHON)" != "$(BIN)/python" ]; then \
		echo "==> Django 5.2 and the django-tasks backport ($(BIN)/python)"; \
		$(BIN)/python tests/upstream/run_upstream_tasks.py || status=1; \
	fi; \
	echo "==> Django's tests/tasks on SQLite"; \
	env -u DATABASE_URL -u OPENWORKFLOW_REQUIRE_POSTGRES -u OPENWORKFLOW_REQUIRE_MARIADB \
		$(UPSTREAM_PYTHON) tests/upstream/run_upstream_tasks.py || status=1; \
	if [ -n "$$DATABASE_URL" ]; then \
		echo "==> Django's tests/tasks on PostgreSQL"; \
		env -u OPENWORKFLOW_REQUIRE_MARIADB $(UPSTREAM_PYTHON) tests/upstream/run_upstream_tasks.py || status=1; \
	fi; \
	if [ -n "$$MARIADB_URL" ]; then \
		echo "==> Django's tests/tasks on MariaDB"; \
		if $(UPSTREAM_PYTHON) -c 'import MySQLdb' 2>/dev/null || $(UPSTREAM_PYTHON) -m pip install -q "mysqlclient>=2.2.1"; then \
			env -u OPENWORKFLOW_REQUIRE_POSTGRES DATABASE_URL="$$MARIADB_URL" \
				$(UPSTREAM_PYTHON) tests/upstream/run_upstream_tasks.py || status=1; \
		else \
			echo "error: could not install mysqlclient: the MariaDB run did not run" >&2; status=1; \
		fi; \
	fi; \
	exit $$status

clean:
	rm -rf .tox build dist docs/_build .ruff_cache .mypy_cache .pytest_cache
	rm -f example_project/db.sqlite3 example_project/db.sqlite3-*
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
