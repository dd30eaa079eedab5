"""Payload encryption at rest (encryption.py, models/fields.py): nothing readable in the tables, all shown decrypted.

Each test runs a real (in-process) worker on the test database, and reads
the tables' raw rows through the connection's cursor, not through the
fields that decrypt.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.core import checks
from django.core.management.base import CommandError
from django.db import connections
from django.test import Client
from django.test.utils import override_settings

from django_openworkflow import RetryPolicy, send_event, send_signal, workflow
from django_openworkflow.client import operations
from django_openworkflow.client.approvals import decide_approval
from django_openworkflow.client.human_tasks import submit_task
from django_openworkflow.client.listing import list_runs
from django_openworkflow.conf import owf_settings
from django_openworkflow.encryption import PREFIX, UNDECRYPTABLE_TEXT, key_id
from django_openworkflow.errors import InvalidArgument, OperationRefused, PayloadUndecryptable
from django_openworkflow.models import Approval, StepAttempt, WorkflowRun
from tests.cli.helpers import as_json, workflows
from tests.conftest import is_parked

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "Zq7xMarkerOfEncryption"
KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
API = "/workflows/api"
_failed_once: set[str] = set()


def encrypted(*keys: str, **more: Any) -> Any:
    """The test settings' OPENWORKFLOW with these keys (and ``more``)."""
    return override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": list(keys), **more})


@workflow(name="encryption-every-path", step_retry_policy=RetryPolicy(maximum_attempts=2, initial_interval="10ms"))
def every_path(ctx: Any) -> Any:
    """Writes its input's secret through every payload path: steps, a failed attempt, progress, waits, approval."""
    secret = ctx.input["secret"]
    first = ctx.step.run("first", lambda: {"echo": secret})

    def fails_once() -> str:
        if str(ctx.run_id) not in _failed_once:
            _failed_once.add(str(ctx.run_id))
            raise ValueError(f"first try failed with {secret}")
        return f"second try {secret}"

    second = ctx.step.run("fails-once", fails_once)
    ctx.publish("progress", {"note": secret})
    ctx.stream("log").write(f"line {secret}")
    signal = ctx.step.wait_for_signal("go", timeout="1h")
    event = ctx.step.wait_for_event("paid", event="encryption.paid", match={"order": ctx.input["order"]}, timeout="1h")
    decision = ctx.wait_for_approval(
        "ok", assignees=["user:ada", "user:bob"], details=f"approve {secret}", timeout="1h", approvals_required=2
    )
    task = ctx.wait_for_input(
        "note",
        form="tests.fixtures.testapp.forms.NoteForm",
        assignees="user:ada",
        initial={"note": secret},
        timeout="1h",
    )
    return {
        "first": first, "second": second, "signal": signal, "event": event,
        "comment": decision.comment, "note": task.data["note"],
    }  # fmt: skip


@workflow(name="encryption-fails", step_retry_policy=RetryPolicy(maximum_attempts=1))
def fails(ctx: Any) -> Any:
    ctx.step.run("boom", lambda: (_ for _ in ()).throw(ValueError(f"boom {ctx.input['secret']}")))


def raw_rows() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the workflow database, as the database holds it (plain SQL)."""
    connection = connections[owf_settings.database]
    found = {}
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            found[table] = [tuple(_text(value) for value in row) for row in cursor.fetchall()]
    return found


def _text(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return value


def tables_holding(marker: str) -> list[str]:
    return sorted(table for table, rows in raw_rows().items() if marker in repr(rows))


@pytest.fixture
def ada(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("ada", password="pw", is_staff=True)


@pytest.fixture
def api(django_user_model: Any) -> Client:
    """A client of the HTTP API, as a superuser."""
    user = django_user_model.objects.create_superuser("api-admin", password="pw")
    client = Client()
    client.force_login(user)
    return client


def _run_every_path(run_worker: Any, ada: Any, secret: str = MARKER) -> Any:
    handle = every_path.run({"secret": secret, "order": 7})
    waits = StepAttempt.objects.filter(workflow_run_id=handle.id, status="running")
    run_worker(until=lambda: is_parked(handle) and waits.filter(step_name="go").exists())
    send_signal(handle.id, "go", {"said": secret})
    run_worker(until=lambda: is_parked(handle) and waits.filter(step_name="paid").exists())
    assert send_event("encryption.paid", {"order": 7, "note": secret}) == 1
    run_worker(until=lambda: Approval.objects.filter(workflow_run_id=handle.id).exists() and is_parked(handle))
    approval = Approval.objects.get(workflow_run_id=handle.id).id
    decide_approval(approval, ada, approved=True, comment=f"yes {secret}")  # a sign-off kept until bob's
    bob = type(ada).objects.create_user("bob")
    decide_approval(approval, bob, approved=True, comment=f"also {secret}")
    task = Approval.objects.filter(workflow_run_id=handle.id).exclude(id=approval)
    run_worker(until=lambda: task.exists() and is_parked(handle))
    submit_task(task.get().id, ada, {"note": f"noted {secret}"})
    run_worker(until=lambda: handle.status() == "completed")
    return handle


def test_no_payload_is_readable_in_any_table_and_every_face_shows_it_decrypted(
    run_worker: Any, ada: Any, admin_client: Client, api: Client
) -> None:
    with encrypted(KEY_A):
        handle = _run_every_path(run_worker, ada)
        failed = fails.run({"secret": MARKER})
        run_worker(until=lambda: failed.status() == "failed")

        assert tables_holding(MARKER) == []  # in no column of any table, the admin's log included
        sealed = tables_holding(f"{PREFIX}{key_id(KEY_A)}:")
        payload_tables = {
            "openworkflow_run", "openworkflow_step_attempt", "openworkflow_signal", "openworkflow_event",
            "openworkflow_published_value", "openworkflow_stream_chunk", "openworkflow_approval",
        }  # fmt: skip
        assert payload_tables <= set(sealed)
        assert all(MARKER not in entry.change_message for entry in LogEntry.objects.all())

        output = handle.result()
        assert output == {
            "first": {"echo": MARKER},
            "second": f"second try {MARKER}",
            "signal": {"said": MARKER},
            "event": {"order": 7, "note": MARKER},
            "comment": f"also {MARKER}",  # the last sign-off's
            "note": f"noted {MARKER}",
        }
        run = WorkflowRun.objects.get(id=failed.id)
        assert run.error["type"] == "StepFailed" and MARKER in run.error["message"] and MARKER in run.error["traceback"]
        first_try = StepAttempt.objects.get(workflow_run_id=handle.id, step_name="fails-once", status="failed")
        assert first_try.error["message"] == f"first try failed with {MARKER}"
        assert handle.get_event("progress", timeout=0) == {"note": MARKER}
        assert list(handle.stream("log", follow=False)) == [f"line {MARKER}"]
        approval, task = Approval.objects.order_by("id")
        assert approval.details == f"approve {MARKER}" and approval.signoffs[0]["comment"] == f"yes {MARKER}"
        assert task.initial == {"note": MARKER}

        # The admin: the run's page, the failed run in the list (its error's message) and on its page.
        page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{handle.id}/change/")
        assert page.status_code == 200 and f"second try {MARKER}" in page.text and f"also {MARKER}" in page.text
        assert f"first try failed with {MARKER}" in page.text and f"line {MARKER}" in page.text
        listed = admin_client.get("/admin/django_openworkflow/workflowrun/?status=failed")
        assert listed.status_code == 200 and f"boom {MARKER}" in listed.text
        failed_page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{failed.id}/change/")
        assert failed_page.status_code == 200 and f"boom {MARKER}" in failed_page.text

        # The command line and the HTTP API.
        shown = as_json("show", str(handle.id))
        assert shown["input"]["secret"] == MARKER and shown["output"] == json.loads(json.dumps(output))
        assert MARKER in workflows("show", str(failed.id))
        answer = api.get(f"{API}/runs/{handle.id}")
        assert answer.status_code == 200 and answer.json()["run"]["output"]["event"]["note"] == MARKER
        steps = api.get(f"{API}/runs/{handle.id}/steps").json()
        assert MARKER in json.dumps(steps)
        errors = api.get(f"{API}/runs/{failed.id}").json()["run"]["error"]
        assert MARKER in errors["message"]


def test_plain_and_encrypted_rows_coexist(run_worker: Any, admin_client: Client) -> None:
    plain = fails.run({"secret": "before"})
    run_worker(until=lambda: plain.status() == "failed")
    with encrypted(KEY_A):
        sealed = fails.run({"secret": "after"})
        run_worker(until=lambda: sealed.status() == "failed")
        rows = {run.id: run for run in WorkflowRun.objects.all()}
        assert rows[plain.id].input == {"secret": "before"} and "boom before" in rows[plain.id].error["message"]
        assert rows[sealed.id].input == {"secret": "after"} and "boom after" in rows[sealed.id].error["message"]
        runs = dict(_raw_inputs())
        assert runs[plain.id.hex].startswith("{") and runs[sealed.id.hex].startswith(f'"{PREFIX}')
        listed = admin_client.get("/admin/django_openworkflow/workflowrun/")
        assert listed.status_code == 200 and "boom before" in listed.text and "boom after" in listed.text


def _raw_inputs() -> list[tuple[str, str]]:
    connection = connections[owf_settings.database]
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, input FROM openworkflow_run")
        return [(str(run_id).replace("-", ""), _stored_text(value)) for run_id, value in cursor.fetchall()]


def _stored_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def test_a_value_no_configured_key_opens_is_shown_as_such_and_its_run_fails_once(
    run_worker: Any, admin_client: Client, api: Client
) -> None:
    with encrypted(KEY_A):
        done = fails.run({"secret": MARKER})
        run_worker(until=lambda: done.status() == "failed")
        finished = every_path.run({"secret": MARKER, "order": 1})
        WorkflowRun.objects.filter(id=finished.id).update(status="completed", output={"kept": MARKER})
        waiting = fails.run({"secret": MARKER})  # not claimed yet: its input is under KEY_A only
    with encrypted(KEY_B):
        run = WorkflowRun.objects.get(id=waiting.id)
        assert run.input == UNDECRYPTABLE_TEXT and run.input.key_id == key_id(KEY_A)
        for shown in (done, waiting):
            page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{shown.id}/change/")
            assert page.status_code == 200 and "cannot be decrypted with the configured keys" in page.text
            answer = api.get(f"{API}/runs/{shown.id}")
            assert answer.status_code == 200 and answer.json()["run"]["input"] == UNDECRYPTABLE_TEXT
            assert "cannot be decrypted" in workflows("show", str(shown.id))
        listed = admin_client.get("/admin/django_openworkflow/workflowrun/")
        assert listed.status_code == 200
        with pytest.raises(PayloadUndecryptable, match=key_id(KEY_A)):
            finished.result(timeout=0)

        # The worker fails the run it cannot read, once: no retry, no release, no loop.
        run_worker(until=lambda: waiting.status() == "failed")
        run = WorkflowRun.objects.get(id=waiting.id)
        assert run.error["type"] == "PayloadUndecryptable" and key_id(KEY_A) in run.error["message"]
        assert run.attempts == 1 and not StepAttempt.objects.filter(workflow_run_id=waiting.id).exists()
        with pytest.raises(ValueError, match="cannot be stored again"):
            WorkflowRun.objects.filter(id=done.id).update(output=run.input)
        # A re-run would start with the placeholder's text: refused, by the admin and the API too.
        with pytest.raises(OperationRefused, match="cannot be decrypted"):
            operations.rerun(done.id)
        answer = api.post(f"{API}/runs/{done.id}/rerun", content_type="application/json")
        assert answer.status_code == 409 and "cannot be decrypted" in answer.json()["error"]["message"]


def test_a_search_by_input_is_refused_and_points_to_attributes(admin_client: Client, api: Client) -> None:
    with encrypted(KEY_A):
        with pytest.raises(InvalidArgument, match="typed attribute") as refused:
            list_runs(input_contains={"secret": MARKER})
        assert refused.value.argument == "input_contains"
        answer = api.get(f"{API}/runs", {"input": json.dumps({"secret": MARKER})})
        assert answer.status_code == 400 and "attribute" in answer.json()["error"]["message"]
        with pytest.raises(CommandError, match="attribute"):
            workflows("list", "--input", json.dumps({"secret": MARKER}))
        page = admin_client.get("/admin/django_openworkflow/workflowrun/", {"q": json.dumps({"secret": 1})})
        assert page.status_code == 200 and "typed attribute" in page.text
    assert list_runs(input_contains={"secret": MARKER}).runs == []  # off: the search works as before


@pytest.fixture
def no_cryptography() -> Iterator[None]:
    saved = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "cryptography"}
    for name in saved:
        sys.modules[name] = None  # type: ignore[assignment]
    sys.modules["cryptography"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.modules.pop("cryptography", None)
        sys.modules.update(saved)


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("not-a-list", "must be a list of Fernet keys"),
        ([], "empty list"),
        (["not a key"], r"\[0\] is not a Fernet key"),
        ([KEY_A, KEY_A], "the same key twice"),
    ],
)
def test_the_check_names_a_key_it_cannot_use(setting: Any, says: str) -> None:
    from django_openworkflow.checks import check_encryption

    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": setting}):
        [error] = check_encryption()
    assert error.id == "openworkflow.E050" and isinstance(error, checks.Error)
    assert pytest.importorskip("re").search(says, error.msg)


def test_the_check_names_a_missing_cryptography_and_a_bad_errors_setting(no_cryptography: None) -> None:
    from django_openworkflow.checks import check_encryption

    with encrypted(KEY_A, ENCRYPT_ERRORS="yes"):
        found = {error.id: error.msg for error in check_encryption()}
    assert "cryptography package is not installed" in found["openworkflow.E050"]
    assert "must be True or False" in found["openworkflow.E051"]
    assert check_encryption() == []  # off, cryptography is not needed


def test_errors_stay_in_clear_when_encrypt_errors_is_false(run_worker: Any) -> None:
    with encrypted(KEY_A, ENCRYPT_ERRORS=False):
        failed = fails.run({"secret": MARKER})
        run_worker(until=lambda: failed.status() == "failed")
        found = tables_holding(MARKER)
    assert found == ["openworkflow_run", "openworkflow_step_attempt"]  # the errors' messages only
    assert f'"{PREFIX}' in _stored_text(dict(_raw_inputs())[failed.id.hex])


def offloaded_to(location: Any, threshold: int = 1, **more: Any) -> Any:
    """Settings that offload every payload of at least ``threshold`` bytes to a file storage at ``location``."""
    return override_settings(
        STORAGES={
            **settings.STORAGES,
            "payloads": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": location}},
        },
        OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_OFFLOAD": {"STORAGE": "payloads", "THRESHOLD": threshold},
                      **more},
    )  # fmt: skip


def test_with_offload_and_compression_on_the_files_are_encrypted_too(
    run_worker: Any, ada: Any, admin_client: Client, tmp_path: Any
) -> None:
    from django_openworkflow.offload import REFERENCE_PREFIX

    # Compressed above 64 bytes, then encrypted, then every stored form offloaded (THRESHOLD 1).
    with offloaded_to(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A], PAYLOAD_COMPRESSION=64):
        handle = _run_every_path(run_worker, ada)
        failed = fails.run({"secret": MARKER})
        run_worker(until=lambda: failed.status() == "failed")

        assert tables_holding(MARKER) == []
        files = [path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()]
        assert len(files) >= 8 and not any(MARKER.encode() in content for content in files)
        assert all(content.startswith(f'"{PREFIX}{key_id(KEY_A)}:'.encode()) for content in files)
        referenced = tables_holding(REFERENCE_PREFIX)
        assert {"openworkflow_run", "openworkflow_step_attempt", "openworkflow_signal", "openworkflow_event",
                "openworkflow_published_value", "openworkflow_stream_chunk"} <= set(referenced)  # fmt: skip

        assert handle.result()["event"] == {"order": 7, "note": MARKER}
        assert handle.get_event("progress", timeout=0) == {"note": MARKER}
        assert list(handle.stream("log", follow=False)) == [f"line {MARKER}"]
        page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{handle.id}/change/")
        assert page.status_code == 200 and f"second try {MARKER}" in page.text and f"line {MARKER}" in page.text
        assert as_json("show", str(handle.id))["input"]["secret"] == MARKER
