"""@workflow declarations, the registry and autodiscovery."""

from __future__ import annotations

import json

import pytest
from django.core import checks
from django.db import connection
from django.test import override_settings
from django.utils.module_loading import autodiscover_modules

from django_openworkflow import WorkflowRegistrationError, workflow
from django_openworkflow.checks import check_settings
from django_openworkflow.definitions.registry import WorkflowRegistry, WorkflowSpec, registry


def make():
    def fn(ctx):
        return None

    return fn


def generator_workflow(ctx):
    yield


def test_workflows_py_of_installed_apps_is_autodiscovered():
    assert registry.get("three-steps", None) is not None
    assert {spec.version for spec in registry.all() if spec.name == "versioned"} == {"v1", "v2"}


def test_same_name_and_version_twice_names_both_places():
    local = WorkflowRegistry()

    def first(ctx):
        return 1

    def second(ctx):
        return 2

    local.register(WorkflowSpec(name="dup", version="v1", fn=first))
    with pytest.raises(WorkflowRegistrationError) as info:
        local.register(WorkflowSpec(name="dup", version="v1", fn=second))
    message = str(info.value)
    assert "test_same_name_and_version_twice_names_both_places.<locals>.first" in message
    assert "test_same_name_and_version_twice_names_both_places.<locals>.second" in message
    # Another version of the same name is fine, and re-importing the same function is idempotent.
    local.register(WorkflowSpec(name="dup", version="v2", fn=second))
    local.register(WorkflowSpec(name="dup", version="v1", fn=first))
    assert local.latest("dup").version == "v2"


def test_versions_sort_naturally():
    local = WorkflowRegistry()
    for version in ("v9", "v10", "v2"):
        local.register(WorkflowSpec(name="n", version=version, fn=make()))
    assert local.latest("n").version == "v10"


def test_a_broken_workflows_module_is_one_clear_error_and_registers_nothing():
    with override_settings(INSTALLED_APPS=["tests.fixtures.broken_app"]):
        with pytest.raises(ImportError, match="broken on purpose"):
            autodiscover_modules("workflows", register_to=registry)
    assert registry.get("registered-before-the-error", None) is None


@pytest.mark.parametrize(
    ("kwargs", "fn", "message"),
    [
        ({}, generator_workflow, "plain or async function, not a generator"),
        ({"name": "ok", "step_timeout": "-1s"}, lambda ctx: None, "step_timeout"),
        ({"name": ""}, lambda ctx: None, "non-empty string"),
        ({"name": "x" * 256}, lambda ctx: None, "at most 255"),
        ({"name": "ok", "version": 2}, lambda ctx: None, "version"),
        ({"name": "ok", "retry_policy": {"maximum_attempts": 3}}, lambda ctx: None, "RetryPolicy"),
    ],
)
def test_bad_declarations_are_clear_errors(kwargs, fn, message):
    with pytest.raises(WorkflowRegistrationError, match=message):
        workflow(**kwargs)(fn)


def test_not_callable_is_rejected():
    with pytest.raises(WorkflowRegistrationError, match="needs a function"):
        workflow(name="x")(42)


def test_calling_a_workflow_directly_explains_how_to_start_it():
    from tests.fixtures.testapp.workflows import three_steps

    with pytest.raises(TypeError, match=r"three_steps.run\(input\)"):
        three_steps({})


def test_unknown_settings_key_is_a_check_error():
    with override_settings(OPENWORKFLOW={"LEESE": "30s"}):
        ids = [m.id for m in check_settings()]
    assert "openworkflow.E001" in ids


@pytest.mark.parametrize(("key", "value"), [("LEASE", "a while"), ("LEASE", "99999y"), ("DRAIN_TIMEOUT", 1e300)])
def test_bad_duration_setting_is_a_check_error(key, value):
    with override_settings(OPENWORKFLOW={key: value}):
        messages = check_settings()
    assert any(m.id == "openworkflow.E002" and key in m.msg for m in messages)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("MAX_PAYLOAD_BYTES", "abc"),
        ("CONCURRENCY", 0),
        ("MAX_STEP_ATTEMPTS", True),
        ("CONCURRENCY", 2.5),
        ("PREFETCH", -1),
        ("PREFETCH", "4"),
    ],
)
def test_bad_number_setting_is_a_check_error_naming_it(key, value):
    with override_settings(OPENWORKFLOW={key: value}):
        messages = check_settings()
    assert [m.id for m in messages if key in m.msg] == ["openworkflow.E005"]


@pytest.mark.parametrize("name", ["a\x00b", json.loads('"\\ud800x"')], ids=["nul", "surrogate"])
def test_workflow_names_no_database_stores_are_refused_at_declaration(name):
    with pytest.raises(WorkflowRegistrationError, match="NUL|surrogate"):
        workflow(name=name)(lambda ctx: None)


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite settings check")
def test_sqlite_without_wal_and_immediate_transactions_warns(monkeypatch):
    assert not [m for m in check_settings() if m.level >= checks.WARNING]
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {})
    assert [m.id for m in check_settings()] == ["openworkflow.W001"]


def test_spec_run_without_the_client_loaded_says_to_install_the_app(monkeypatch):
    # The app's ready() imports the client, which hands itself to the registry; without
    # that (the app missing from INSTALLED_APPS) spec.run() says what to do.
    from django.core.exceptions import ImproperlyConfigured

    from django_openworkflow.definitions import registry as registry_module

    monkeypatch.setattr(registry_module, "_installed_client", None)
    spec = WorkflowSpec(name="not-started", version=None, fn=lambda ctx: None)
    with pytest.raises(ImproperlyConfigured, match="add 'django_openworkflow' to INSTALLED_APPS"):
        spec.run()
