# Developer tasks. Needs only python3: everything else goes into .venv.
#
#   make demo              run the example workflow end to end (SQLite by default)
#   make test              pytest on SQLite, then on PostgreSQL if DATABASE_URL is set
#   make lint              ruff (and mypy, once it is configured)
#   make migrations-check  fail if models and migrations disagree
#   make tox TOX_ARGS="-e py312-django60-sqlite"

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
TOX_ARGS ?=

# DATABASE_URL with any password replaced by ***, for printing.
SHOW_DB = printf '%s' "$$DATABASE_URL" | sed -E 's|(//[^:/@]*):[^@]*@|\1:***@|'

.PHONY: help venv .venv demo test lint migrations-check tox clean distclean

help:
	@awk '/^#/ { sub(/^# ?/, ""); print; next } { exit }' Makefile

venv .venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -e ".[dev]"
	touch $@

demo: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py demo

test: $(STAMP)
	@if [ -n "$$OPENWORKFLOW_REQUIRE_POSTGRES" ] && [ -z "$$DATABASE_URL" ]; then \
		echo "error: OPENWORKFLOW_REQUIRE_POSTGRES is set but DATABASE_URL is not;" \
		     "set DATABASE_URL=postgres://user@host:5432/dbname" >&2; \
		exit 1; \
	fi
	@status=0; \
	echo "==> pytest on SQLite"; \
	env -u DATABASE_URL -u OPENWORKFLOW_REQUIRE_POSTGRES $(BIN)/pytest $(PYTEST_ARGS) || status=1; \
	if [ -n "$$DATABASE_URL" ]; then \
		echo "==> pytest on PostgreSQL: $$($(SHOW_DB))"; \
		$(BIN)/pytest $(PYTEST_ARGS) || status=1; \
	else \
		echo "==> DATABASE_URL is not set: skipping the PostgreSQL run"; \
	fi; \
	exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .
	@if [ -f mypy.ini ] || grep -qs '^\[mypy' setup.cfg || grep -qs '^\[tool\.mypy' pyproject.toml; then \
		echo "$(BIN)/mypy django_openworkflow"; $(BIN)/mypy django_openworkflow; \
	else \
		echo "(mypy is not configured yet: skipped)"; \
	fi

migrations-check: $(STAMP)
	$(BIN)/python -m django makemigrations --check --dry-run --settings=tests.settings

tox: $(STAMP)
	$(BIN)/tox $(TOX_ARGS)

clean:
	rm -rf .tox build dist .ruff_cache .mypy_cache .pytest_cache
	rm -f example_project/db.sqlite3 example_project/db.sqlite3-*
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
