"""Hostile input at every front door: a clear error, nothing written, never a 500 (issue 12).

A table: entry points (the Python API, the admin's start and signal forms,
``manage.py workflows start`` and ``signal``, the example project's
``/start/``) × hostile payloads, idempotency keys and durations. Every case
checks the message names the problem (and, for a payload, where in it), that
no run, signal or event row was written, and that no page answered 500 (the
test client raises on a server error). It runs on every database: the
values are refused before anything reaches one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_openworkflow import PayloadError, send_event, send_signal, start_run
from django_openworkflow.models import Event, Signal, WorkflowRun
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db
LIMIT = 1000  # MAX_PAYLOAD_BYTES in these tests


def nested(depth: int) -> Any:
    """A list ``depth`` levels deep: ``[[[...]]]``."""
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


@dataclass(frozen=True)
class Payload:
    name: str
    value: Any  # for the Python API
    text: str  # for the forms and the command line: JSON text that reads back as ``value``
    problem: str  # a regex the message must match
    path: str | None  # where in the payload, after its root (``["a"]``); None when the message cannot say

    def expect(self, root: str) -> str:
        return self.problem + ("" if self.path is None else f"|{re.escape(root + self.path)}")


def _payload(name: str, value: Any, problem: str, path: str | None, text: str | None = None) -> Payload:
    return Payload(name, value, json.dumps(value) if text is None else text, problem, path)


PAYLOADS = [
    _payload("nul-in-value", {"a": "x\x00y"}, "NUL", '["a"]'),
    _payload("nul-in-key", {"x\x00y": 1}, "NUL", '["x\\u0000y"]'),
    _payload("surrogate-in-value", {"a": "\ud800"}, "surrogate", '["a"]'),
    _payload("surrogate-in-key", {"\ud800": 1}, "surrogate", '["\\ud800"]'),
    _payload("100-deep", nested(100), "deeper than 30", "[0][0][0]"),
    _payload("5000-deep", nested(5000), "deeper than 30", None, text="[" * 5000 + "]" * 5000),
    _payload("nan", {"a": float("nan")}, "NaN", None),
    _payload("infinity", [float("inf")], "Infinity", None),
    _payload("over-the-limit", {"blob": "x" * (LIMIT + 100)}, f"over the limit of {LIMIT}", None),
]


def row_counts() -> tuple[int, int, int]:
    return WorkflowRun.objects.count(), Signal.objects.count(), Event.objects.count()


@pytest.fixture
def admin(client: Any, django_user_model: Any) -> Any:
    """A signed-in superuser (no password: hashing one costs more than the test)."""
    client.force_login(django_user_model.objects.create(username="admin", is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def target(admin: Any) -> WorkflowRun:
    """An unfinished run to send signals to (written before the counts are taken)."""
    return WorkflowRun.objects.create(workflow_name="approval", status="pending", available_at=timezone.now())


# -- the front doors: each takes (client, run, payload or key) and returns the error message -----------


def refused(call: Callable[[], Any], error: type[Exception] = ValueError) -> str:
    with pytest.raises(error) as info:
        call()
    return str(info.value)


def form_errors(response: Any, form: str) -> str:
    assert response.status_code == 200
    errors = response.context[form].errors
    assert errors, "the form was accepted"
    return " ".join(str(message) for messages in errors.values() for message in messages)


def workflows(*args: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command("workflows", *args, stdout=StringIO())
    message = str(info.value)
    assert "\n" not in message and "\x1b" not in message, message
    return message


START_URL = reverse("admin:django_openworkflow_workflowrun_add")
THREE_STEPS = json.dumps(["three-steps", None])


def signal_url(run: WorkflowRun) -> str:
    return reverse("admin:django_openworkflow_workflowrun_signal", args=[run.id])


@dataclass(frozen=True)
class Door:
    name: str
    root: str  # how payload paths start in its messages
    payload: Callable[[Any, WorkflowRun, Payload], str]
    key: Callable[[Any, WorkflowRun, str], str]
    takes_any_text: bool = True  # False: a form, which a browser cannot send a lone surrogate through


DOORS = [
    Door(
        "api-run",
        "input",
        lambda client, run, p: refused(lambda: three_steps.run(p.value), PayloadError),
        lambda client, run, key: refused(lambda: three_steps.run({}, idempotency_key=key)),
    ),
    Door(
        "api-start-run",
        "input",
        lambda client, run, p: refused(lambda: start_run("three-steps", p.value), PayloadError),
        lambda client, run, key: refused(lambda: start_run("three-steps", idempotency_key=key)),
    ),
    Door(
        "api-send-signal",
        "data",
        lambda client, run, p: refused(lambda: send_signal(run.id, "go", p.value), PayloadError),
        lambda client, run, key: refused(lambda: send_signal(run.id, "go", 1, idempotency_key=key)),
    ),
    Door(
        "api-send-event",
        "payload",
        lambda client, run, p: refused(lambda: send_event("order.paid", p.value), PayloadError),
        lambda client, run, key: refused(lambda: send_event("order.paid", 1, idempotency_key=key)),
    ),
    Door(
        "admin-start-form",
        "input",
        lambda client, run, p: form_errors(client.post(START_URL, {"workflow": THREE_STEPS, "input": p.text}), "form"),
        lambda client, run, key: form_errors(
            client.post(START_URL, {"workflow": THREE_STEPS, "input": "{}", "idempotency_key": key}), "form"
        ),
        takes_any_text=False,
    ),
    Door(
        "admin-signal-form",
        "data",
        lambda client, run, p: form_errors(
            client.post(signal_url(run), {"name": "go", "json_data": p.text}), "signal_form"
        ),
        lambda client, run, key: form_errors(
            client.post(signal_url(run), {"name": "go", "json_data": "1", "idempotency_key": key}), "signal_form"
        ),
        takes_any_text=False,
    ),
    Door(
        "cli-start",
        "input",
        lambda client, run, p: workflows("start", "three-steps", "--input", p.text),
        lambda client, run, key: workflows("start", "three-steps", "--idempotency-key", key),
    ),
    Door(
        "cli-signal",
        "data",
        lambda client, run, p: workflows("signal", str(run.id), "go", "--data", p.text),
        lambda client, run, key: workflows("signal", str(run.id), "go", "--idempotency-key", key),
    ),
]


@override_settings(OPENWORKFLOW={"MAX_PAYLOAD_BYTES": LIMIT})
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: p.name)
@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.name)
def test_hostile_payloads_are_refused_before_anything_is_written(
    door: Door, payload: Payload, admin: Any, target: WorkflowRun
) -> None:
    before = row_counts()
    message = door.payload(admin, target, payload)
    assert re.search(payload.problem, message), message
    if payload.path is not None:
        assert door.root + payload.path in message, message
    assert row_counts() == before


KEYS = [
    pytest.param("k\x00", "(?i)NUL", id="nul"),
    pytest.param("k\ud800", "surrogate", id="surrogate"),
    pytest.param("k" * 256, "255 characters", id="256-characters"),
]


@pytest.mark.parametrize(
    ("door", "key", "problem"),
    [
        pytest.param(door, *key.values, id=f"{door.name}-{key.id}")
        for door in DOORS
        for key in KEYS
        if door.takes_any_text or key.id != "surrogate"
    ],
)
def test_hostile_idempotency_keys_are_refused(
    door: Door, key: str, problem: str, admin: Any, target: WorkflowRun
) -> None:
    before = row_counts()
    message = door.key(admin, target, key)
    assert re.search(problem, message), message
    assert row_counts() == before


@pytest.mark.parametrize("duration", ["99999y", "9999999999y", 1e300])
@pytest.mark.parametrize("argument", ["available_at", "deadline_at"])
def test_durations_beyond_the_limit_are_refused(argument: str, duration: Any) -> None:
    message = refused(lambda: three_steps.run({}, **{argument: duration}))
    assert "1000 years" in message
    assert row_counts() == (0, 0, 0)


# -- the example project's /start/ ------------------------------------------------------------------

example_urls = override_settings(ROOT_URLCONF="example_project.urls")


@pytest.fixture
def signed_in(client: Any, django_user_model: Any) -> Any:
    """A signed-in user who is not staff: /start/ asks for a login, not for admin rights."""
    client.force_login(django_user_model.objects.create(username="ada"))
    return client


@example_urls
def test_example_start_needs_a_login(client: Any) -> None:
    for response in (client.get("/start/"), client.post("/start/", {"email": "e@example.com", "delay": "1s"})):
        assert response.status_code == 302
        assert response["Location"] == "/admin/login/?next=/start/"
    assert row_counts() == (0, 0, 0)


@example_urls
def test_example_start_starts_a_run_for_a_signed_in_user(signed_in: Any) -> None:
    assert b"Start onboard-user" in signed_in.get("/start/").content
    response = signed_in.post("/start/", {"email": "ada@example.com", "delay": "1s"})
    run = WorkflowRun.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/{run.id}/change/")
    assert (run.workflow_name, run.input["email"], run.input["delay"]) == ("onboard-user", "ada@example.com", "1s")


@example_urls
@override_settings(OPENWORKFLOW={"MAX_PAYLOAD_BYTES": LIMIT})
@pytest.mark.parametrize(
    ("email", "delay", "problem"),
    [
        pytest.param("a\x00b@example.com", "1s", r'input\["email"\] contains a NUL', id="nul-in-value"),
        pytest.param("a" * LIMIT + "@example.com", "1s", f"over the limit of {LIMIT}", id="over-the-limit"),
        pytest.param("ada@example.com", "99999y", "1000 years", id="99999y"),
        pytest.param("ada@example.com", "9999999999y", "1000 years", id="9999999999y"),
        pytest.param("ada@example.com", "soon", "invalid duration", id="not-a-duration"),
    ],
)
def test_example_start_refuses_bad_input_with_a_400(signed_in: Any, email: str, delay: str, problem: str) -> None:
    response = signed_in.post("/start/", {"email": email, "delay": delay})
    assert response.status_code == 400
    message = response.content.decode()
    assert message.startswith("Not started: ") and re.search(problem, message), message
    assert row_counts() == (0, 0, 0)
