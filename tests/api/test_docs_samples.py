"""The HTTP API page's curl samples (docs/howto/http-api.md) do what the page says.

The page's ```bash blocks are read from the page and run as printed, with
curl, against a live server: log in through the admin's login form, start a
run, find the failed runs of a customer, start one with an API token, and
send a body the API refuses.
The same requests are made with Django's test client (CSRF checks on), so
they are tested where curl is missing too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from django_openworkflow import workflow
from django_openworkflow.definitions.registry import registry
from django_openworkflow.models import ApiToken
from django_openworkflow.testing import drain
from tests.conftest import CEILING

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "http-api.md"
PAGE_BASE = "http://localhost:8000"
PASSWORD = "a-password-for-the-docs"


def bash_blocks() -> list[str]:
    """The page's ```bash blocks, in order: log in, start a run, search, start with a token, a refused start."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 5, "docs/howto/http-api.md should have five bash samples"
    return blocks


@pytest.fixture
def charge_order() -> Iterator[None]:
    """The workflow the page starts; it fails, so that the page's search for failed runs finds it."""
    saved = dict(registry._registry)

    @workflow(name="charge-order")
    def charge(ctx: Any) -> None:
        raise RuntimeError("card declined")

    try:
        yield
    finally:
        registry._registry.clear()
        registry._registry.update(saved)


@pytest.fixture
def script_user(django_user_model: Any) -> Any:
    """A staff user (the admin's login form takes staff users) that may read and start runs."""
    user = django_user_model.objects.create_user("script", password=PASSWORD, is_staff=True)
    for action in ("view", "add"):
        user.user_permissions.add(
            Permission.objects.get(codename=f"{action}_workflowrun", content_type__app_label="django_openworkflow")
        )
    return user


def run_bash(script: str, state: Path, env: dict[str, str]) -> str:
    """Run one block in bash, with the variables the earlier blocks set, and keep those it sets."""
    prelude = f'[ -f "{state}" ] && . "{state}"\n'
    keep = f'\ndeclare -p BASE JAR TOKEN > "{state}"\n'
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", prelude + script + keep],
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_curl_samples_on_a_live_server(
    live_server: Any, charge_order: None, script_user: Any, tmp_path: Path
) -> None:
    login, start, search, with_token, refused = (block.replace(PAGE_BASE, live_server.url) for block in bash_blocks())
    _, api_token = ApiToken.objects.create_token(script_user, "docs")
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path), "API_USER": "script", "API_PASSWORD": PASSWORD}
    state = tmp_path / "state.sh"

    run_bash(login, state, env)
    started = json.loads(run_bash(start, state, env))
    assert started["created"] is True
    assert started["run"]["workflow"] == "charge-order"
    assert started["run"]["input"] == {"customer": 42}

    drain()  # the run fails
    found = json.loads(run_bash(search, state, env))
    assert [run["id"] for run in found["runs"]] == [started["run"]["id"]]
    assert found["runs"][0]["status"] == "failed"
    assert found["next_cursor"] is None and found["next"] is None

    # No cookie jar, no CSRF token: the token alone.
    by_token = json.loads(run_bash(with_token, state, {**env, "API_TOKEN": api_token}))
    assert by_token["created"] is True and by_token["run"]["input"] == {"customer": 7}

    error = json.loads(run_bash(refused, state, env))["error"]
    assert error == {
        "code": "invalid",
        "message": "workflow is required: a string of 1 to 255 characters, not null",
        "field": "workflow",
    }


def test_the_same_requests_with_the_test_client(charge_order: None, script_user: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.get("/admin/login/")
    token = client.cookies["csrftoken"].value
    login = {"username": "script", "password": PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/"}
    assert client.post("/admin/login/", login).status_code == 302
    token = client.cookies["csrftoken"].value  # logging in gives a new token
    assert client.cookies["sessionid"].value

    def start(body: dict[str, Any]) -> Any:
        return client.post(
            "/workflows/api/runs", json.dumps(body), content_type="application/json", HTTP_X_CSRFTOKEN=token
        )

    started = start({"workflow": "charge-order", "input": {"customer": 42}})
    assert started.status_code == 201 and started.json()["created"] is True
    drain()
    found = client.get("/workflows/api/runs", {"input": '{"customer": 42}', "status": "failed"})
    assert [run["id"] for run in found.json()["runs"]] == [started.json()["run"]["id"]]
    refused = start({"workflow": None})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "workflow"
    without_token = client.post("/workflows/api/runs", "{}", content_type="application/json")
    assert without_token.status_code == 403 and without_token.json()["error"]["code"] == "csrf_failed"
