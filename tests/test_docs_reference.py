"""The reference pages (docs/reference/) name everything the code has: a new setting, check, option,
metric, hook, exception, error type or public name that is not documented fails here.

Everything is collected from the code (imported and introspected, or its syntax tree read), never
from a list kept here, so the list cannot go stale with the pages.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import json
import re
from pathlib import Path

import pytest
from django.core.management import find_commands, load_command_class
from django.core.management.base import BaseCommand
from django.dispatch import Signal

import django_openworkflow
from django_openworkflow import errors, hooks, testing
from django_openworkflow.client import operations
from django_openworkflow.conf import DEFAULTS
from django_openworkflow.testing import pytest_plugin

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_openworkflow"
REFERENCE = ROOT / "docs" / "reference"


def page(name: str) -> str:
    return (REFERENCE / name).read_text()


def quoted(text: str, word: str) -> bool:
    """Whether ``word`` appears in ``text`` as code: between backticks, alone or at the start of a longer span."""
    return re.search("`" + re.escape(word) + r"(?![\w-])[^`\n]*`", text) is not None


def sections(text: str) -> dict[str, str]:
    """Each heading's title without backticks (``workflows list``) and its text up to the next heading."""
    found: dict[str, str] = {}
    parts = re.split(r"^#+ (.*)$", text, flags=re.MULTILINE)
    for title, body in zip(parts[1::2], parts[2::2], strict=True):
        found[title.strip().strip("`")] = body
    return found


@functools.cache
def package_trees() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the package but its migrations, parsed: once per process (collection reads them
    twice, for the check ids and the engine's error types, in every pytest process of every leg)."""
    return tuple(
        (path, ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
    )


# -- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(DEFAULTS))
def test_every_setting_is_in_settings_md(key):
    assert quoted(page("settings.md"), key), f"OPENWORKFLOW[{key!r}] is not in docs/reference/settings.md"


# -- system checks ----------------------------------------------------------------------------


def check_ids() -> list[str]:
    """Every ``id="openworkflow.X000"`` given to a check message in the package."""
    ids = set()
    for _, tree in package_trees():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "id"
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
                and node.value.value.startswith("openworkflow.")
            ):
                ids.add(node.value.value)
    return sorted(ids)


def test_the_check_ids_are_found():
    assert {"openworkflow.E001", "openworkflow.W001", "openworkflow.W080"} <= set(check_ids())


@pytest.mark.parametrize("check_id", check_ids())
def test_every_check_is_in_checks_md(check_id):
    text = page("checks.md")
    assert f"### `{check_id}`" in text, f"{check_id} has no section in docs/reference/checks.md"
    assert f"(check-{check_id.split('.')[1]})=" in text, f"{check_id} has no label for links"


# -- management commands ------------------------------------------------------------------------


def commands() -> list[str]:
    return sorted(find_commands(str(PACKAGE / "management")))


def own_options(parser: argparse.ArgumentParser, skip: set[str]) -> list[str]:
    return sorted(option for action in parser._actions for option in action.option_strings if option not in skip)


def common_options() -> set[str]:
    """The options every Django command has (``--settings``, ``-v`` ...), documented by Django."""
    parser = BaseCommand().create_parser("manage.py", "command")
    return {option for action in parser._actions for option in action.option_strings}


def command_options() -> list[tuple[str, str]]:
    """(section title, option) for each option of each command and subcommand."""
    found = []
    for name in commands():
        parser = load_command_class("django_openworkflow", name).create_parser("manage.py", name)
        found += [(name, option) for option in own_options(parser, common_options())]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub_parser in action.choices.items():
                    title = f"{name} {sub_name}"
                    found.append((title, ""))
                    found += [(title, option) for option in own_options(sub_parser, {"-h", "--help"})]
                    for nested in sub_parser._actions:  # workflows token create|list|revoke: in one section
                        if isinstance(nested, argparse._SubParsersAction):
                            for nested_parser in nested.choices.values():
                                found += [(title, option) for option in own_options(nested_parser, {"-h", "--help"})]
    return list(dict.fromkeys(found))


def test_the_commands_are_found():
    assert {"runworkflows", "workflows"} <= set(commands())
    assert ("runworkflows", "--queue") in command_options()
    assert ("workflows prune", "--older-than") in command_options()
    assert ("workflows token", "--expires") in command_options()


@pytest.mark.parametrize(("title", "option"), command_options())
def test_every_command_and_option_is_in_cli_md(title, option):
    found = sections(page("cli.md"))
    assert title in found, f"`{title}` has no section in docs/reference/cli.md"
    if option:
        # An option every subcommand shares (--json) may be described once, in the command's section.
        parent = found.get(title.split()[0], "")
        assert quoted(found[title], option) or quoted(parent, option), (
            f"{title} {option} is not in its section of docs/reference/cli.md"
        )


# -- metrics --------------------------------------------------------------------------------------


def test_every_counter_and_histogram_is_in_metrics_md():
    pytest.importorskip("prometheus_client")
    from prometheus_client.metrics import MetricWrapperBase

    from django_openworkflow.metrics import recorder

    metrics = [value for value in vars(recorder).values() if isinstance(value, MetricWrapperBase)]
    assert len(metrics) >= 5
    text = page("metrics.md")
    for metric in metrics:
        name = metric._name
        labels = list(metric._labelnames)
        exposed = f"{name}_total" if metric._type == "counter" else name
        row = next((line for line in text.splitlines() if line.startswith(f"| `{exposed}` |")), None)
        assert row is not None, f"{exposed} has no row in docs/reference/metrics.md"
        assert f"| {metric._type} |" in row, f"{exposed}: its type {metric._type} is not in its row"
        assert all(f"`{label}`" in row for label in labels), f"{exposed}: its labels {labels} are not in its row"


@pytest.mark.django_db
def test_every_gauge_is_in_metrics_md():
    pytest.importorskip("prometheus_client")
    from django_openworkflow.metrics.collector import DatabaseCollector

    gauges = list(DatabaseCollector().collect())
    assert gauges
    text = page("metrics.md")
    for gauge in gauges:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{gauge.name}` |")), None)
        assert row is not None, f"{gauge.name} has no row in docs/reference/metrics.md"
        labels = {label for sample in gauge.samples for label in sample.labels}
        assert all(f"`{label}`" in row for label in labels), f"{gauge.name}: its labels are not in its row"


def test_every_span_is_in_metrics_md():
    source = (PACKAGE / "tracing.py").read_text()
    spans = set(re.findall(r'"(workflow\.(?:run|step|signal))"', source))
    attributes = set(re.findall(r'"(workflow\.[a-z_.]+)":', source)) | set(
        re.findall(r'set_attribute\("(workflow\.[a-z_.]+)"', source)
    )
    assert spans == {"workflow.run", "workflow.step", "workflow.signal"}
    text = page("metrics.md")
    for name in sorted(spans | attributes):
        assert f"`{name}`" in text, f"the span or attribute {name} is not in docs/reference/metrics.md"


# -- hooks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(n for n, v in vars(hooks).items() if isinstance(v, Signal)))
def test_every_hook_is_in_hooks_md(name):
    assert f"## `{name}`" in page("hooks.md"), f"hooks.{name} has no section in docs/reference/hooks.md"


# -- errors -----------------------------------------------------------------------------------------


def exception_classes() -> list[str]:
    return sorted(
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == errors.__name__
    )


@pytest.mark.parametrize("name", exception_classes())
def test_every_exception_is_in_errors_md(name):
    assert f"autoexception:: django_openworkflow.errors.{name}" in page("errors.md")


def _string(node: ast.AST) -> str | None:
    """A string constant, or a module-level name of errors.py that holds one (``STEP_LIMIT_EXCEEDED``)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(getattr(errors, node.id, None), str):
        return str(getattr(errors, node.id))
    return None


def engine_error_types() -> list[str]:
    """The ``type`` of every error the engine makes itself: ``engine_error(KIND, ...)`` calls and
    ``{"type": "Kind", ...}`` literals (a run's open steps closed by a cancel)."""
    kinds = set()
    for path, tree in package_trees():
        if path.relative_to(PACKAGE).parts[0] in ("api", "admin", "testing"):
            continue  # JSON Schema's "type", form widgets; the testing backend copies the store's
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "engine_error" and node.args:
                kind = _string(node.args[0])
                assert kind is not None, f"{path}:{node.lineno}: engine_error() with a kind this test cannot read"
                kinds.add(kind)
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    kind = _string(value) if isinstance(key, ast.Constant) and key.value == "type" else None
                    if kind is not None and re.fullmatch(r"[A-Z][A-Za-z]+", kind):
                        kinds.add(kind)
    return sorted(kinds)


def test_the_engine_error_types_are_found():
    assert {"LeaseExpired", "DeadlineExceeded", "Canceled", "EngineError", "StepLimitExceeded"} <= set(
        engine_error_types()
    )


@pytest.mark.parametrize("kind", engine_error_types())
def test_every_engine_error_type_is_in_errors_md(kind):
    row = f"| `{kind}` |"
    assert row in page("errors.md"), f'error["type"] {kind!r} has no row in docs/reference/errors.md'


# -- the Python API ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", django_openworkflow.__all__)
def test_every_public_name_is_in_api_md(name):
    text = page("api.md")
    assert f"django_openworkflow.{name}" in text or f"django_openworkflow.errors.{name}" in text, (
        f"django_openworkflow.{name} is not in docs/reference/api.md"
    )


def public_testing_names() -> list[str]:
    fixtures = [
        name
        for name, value in vars(pytest_plugin).items()
        if type(value).__name__ == "FixtureFunctionDefinition" or hasattr(value, "_pytestfixturefunction")
    ]
    assert fixtures, "no fixture found in django_openworkflow.testing.pytest_plugin"
    public = [name for name, value in vars(testing).items() if callable(value) and not name.startswith("_")]
    ours = [name for name in public if getattr(vars(testing)[name], "__module__", "") == testing.__name__]
    return sorted({*testing.__all__, *ours}) + [f"pytest_plugin.{name}" for name in fixtures]


@pytest.mark.parametrize("name", public_testing_names())
def test_every_testing_name_is_in_api_md(name):
    assert f"django_openworkflow.testing.{name}" in page("api.md")


@pytest.mark.parametrize("name", sorted(operations.REFUSALS))
def test_every_run_operation_is_in_api_md(name):
    text = page("api.md")
    assert f"autofunction:: django_openworkflow.client.operations.{name}\n" in text
    assert f"autofunction:: django_openworkflow.client.operations.{name}_many\n" in text


# -- the HTTP API -------------------------------------------------------------------------------------

OPENAPI_PREFIX = "/workflows/api"
REGENERATE = (
    'regenerate it: DJANGO_SETTINGS_MODULE=tests.settings python -c "import django, json; django.setup(); '
    "from django_openworkflow.api.schema import openapi_schema; "
    f"print(json.dumps(openapi_schema('{OPENAPI_PREFIX}'), indent=2))\" > docs/reference/openapi.json"
)


def test_the_included_openapi_document_is_the_served_one():
    from django_openworkflow.api.schema import openapi_schema

    included = json.loads(page("openapi.json"))
    assert included == json.loads(json.dumps(openapi_schema(OPENAPI_PREFIX))), (
        f"docs/reference/openapi.json is stale; {REGENERATE}"
    )


def test_every_endpoint_is_in_openapi_md():
    from django_openworkflow.api.schema import openapi_schema

    text = page("openapi.md")
    paths = openapi_schema(OPENAPI_PREFIX)["paths"]
    endpoints = [f"{method.upper()} {path}" for path, methods in paths.items() for method in methods]
    assert endpoints
    missing = [endpoint for endpoint in endpoints if f"| `{endpoint}` |" not in text]
    assert not missing, f"endpoints without a row in docs/reference/openapi.md: {missing}"
