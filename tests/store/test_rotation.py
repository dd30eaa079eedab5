"""``workflows rotate-keys`` (store/rotation.py): payloads re-encrypted to the first key, resumable, no lost update."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections
from django.test.utils import override_settings
from django.utils import timezone

from django_openworkflow import workflow
from django_openworkflow.conf import owf_settings
from django_openworkflow.encryption import PREFIX, key_id
from django_openworkflow.models import Approval, Event, PublishedValue, Signal, StepAttempt, StreamChunk, WorkflowRun
from django_openworkflow.store import rotation
from django_openworkflow.worker.loop import Worker
from tests.cli.helpers import as_json, workflows
from tests.conftest import CEILING, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

OLD = Fernet.generate_key().decode()
NEW = Fernet.generate_key().decode()
ROWS = 12


def keys(*keys: str, **more: Any) -> Any:
    return override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": list(keys), **more})


def _error(i: int) -> dict[str, Any]:
    return {
        "type": "ValueError",
        "message": f"message {i}",
        "traceback": f"traceback {i}",
        "child_error": {"type": "KeyError", "message": f"child {i}"},
    }


def make_rows(first: int = 0, count: int = ROWS) -> None:
    """``count`` runs with a payload in every column (as the settings in force store them)."""
    now = timezone.now()
    for i in range(first, first + count):
        run = WorkflowRun.objects.create(
            workflow_name="rotated", input={"i": i}, output=[i], error=_error(i), available_at=now
        )
        attempt = StepAttempt.objects.create(
            workflow_run=run, step_name="s", kind="run", status="completed", output={"o": i}, error=_error(i)
        )
        Signal.objects.create(workflow_run=run, name="go", data={"s": i})
        Event.objects.create(event_type="e", payload={"e": i})
        PublishedValue.objects.create(workflow_run=run, key="k", value={"p": i}, position=0, updated_at=now)
        StreamChunk.objects.create(workflow_run=run, stream="log", offset=0, data=f"chunk {i}", created_at=now)
        Approval.objects.create(
            workflow_run=run, attempt=attempt, step_key="a", name="a", details=f"details {i}", comment=f"comment {i}",
            initial={"note": i}, signoffs=[{"by": "ada", "at": "", "comment": f"signed {i}"}], created_at=now,
            timeout_at=now,
        )  # fmt: skip


def stored_values() -> list[str]:
    """Every stored value of the payload columns, as the database holds it (plain SQL)."""
    connection = connections[owf_settings.database]
    found = []
    with connection.cursor() as cursor:
        for model, name in rotation.PAYLOAD_COLUMNS:
            column = model._meta.get_field(name).column
            cursor.execute(f"SELECT {connection.ops.quote_name(column)} FROM {model._meta.db_table}")
            found += [value if isinstance(value, str) else json.dumps(value) for (value,) in cursor.fetchall()]
    return [value for value in found if value not in (None, "")]


def values_read() -> list[Any]:
    """What the fields read: every payload of every row, decrypted."""
    read = []
    for model, name in rotation.PAYLOAD_COLUMNS:
        read += list(model.objects.order_by("pk").values_list(name, flat=True))
    return read


def test_rotation_interrupted_then_resumed_rewrites_each_value_once_and_loses_nothing() -> None:
    make_rows(0, ROWS // 2)  # in clear: written before encryption was turned on
    with keys(OLD):
        make_rows(ROWS // 2, ROWS // 2)
        expected = values_read()
    with keys(NEW, OLD):
        assert values_read() == expected
        batches = 0

        def interrupt(progress: rotation.ColumnProgress) -> None:
            nonlocal batches
            batches += 1
            if batches == 3:
                raise KeyboardInterrupt

        first_pass: list[rotation.ColumnProgress] = []
        with pytest.raises(KeyboardInterrupt):
            for model, name in rotation.PAYLOAD_COLUMNS:
                first_pass.append(rotation.rotate_column(model, name, batch_size=5, on_batch=interrupt))
        # The first column's three batches (5, 5 and 2 rows) were written before the interruption.
        assert sum(count for _, count in rotation.pending_counts()) == len(rotation.PAYLOAD_COLUMNS) * ROWS - 12
        resumed = [rotation.rotate_column(m, n, batch_size=5, on_batch=None) for m, n in rotation.PAYLOAD_COLUMNS]
        assert sum(p.rewritten for p in resumed) == len(rotation.PAYLOAD_COLUMNS) * ROWS - 12  # nothing twice
        assert all(p.undecryptable == p.changed == 0 for p in resumed)
        assert rotation.pending_counts() == [(p.name, 0) for p in resumed]
        again = [rotation.rotate_column(m, n, batch_size=5, on_batch=None) for m, n in rotation.PAYLOAD_COLUMNS]
        assert sum(p.rewritten for p in again) == 0
    with keys(NEW):  # the old key removed: everything still reads
        assert values_read() == expected
    current = f"{PREFIX}{key_id(NEW)}:"
    stored = stored_values()
    assert stored and all(current in value for value in stored)
    assert not any(f"{PREFIX}{key_id(OLD)}:" in value for value in stored)
    assert not any("message" in value and "message 1" in value for value in stored)


def test_a_value_written_between_the_read_and_the_rewrite_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    with keys(OLD):
        make_rows(0, 3)
        run_id, before = WorkflowRun.objects.order_by("pk").values_list("id", "output")[1]
    needs_writing = rotation._needs_writing
    written = []

    def a_worker_writes_first(value: Any, ring: Any, is_error: bool) -> Any:
        if not written:  # a worker's fenced write of the output, after this pass read the row
            written.append(WorkflowRun.objects.filter(id=run_id).update(output={"the worker's": "value"}))
        return needs_writing(value, ring, is_error)

    monkeypatch.setattr(rotation, "_needs_writing", a_worker_writes_first)
    with keys(NEW, OLD):
        progress = rotation.rotate_column(WorkflowRun, "output", batch_size=10, on_batch=None)
        assert (progress.rewritten, progress.changed) == (2, 1)
        assert WorkflowRun.objects.get(id=run_id).output == {"the worker's": "value"}  # not the pass's stale [1]
        monkeypatch.setattr(rotation, "_needs_writing", needs_writing)
        assert rotation.rotate_column(WorkflowRun, "output", batch_size=10, on_batch=None).rewritten == 0
    with keys(NEW):
        outputs = dict(WorkflowRun.objects.values_list("id", "output"))
    assert outputs.pop(run_id) == {"the worker's": "value"}
    assert sorted(outputs.values()) == [value for value in ([0], [1], [2]) if value != before]  # the others intact


def test_values_no_key_opens_are_left_and_counted() -> None:
    with keys(OLD):
        make_rows(0, 2)
    with keys(NEW):  # OLD is gone
        progress = rotation.rotate_column(WorkflowRun, "input", batch_size=10, on_batch=None)
        assert (progress.rewritten, progress.undecryptable) == (0, 2)
        errors = rotation.rotate_column(StepAttempt, "error", batch_size=10, on_batch=None)
        assert (errors.rewritten, errors.undecryptable) == (0, 2)


def test_errors_are_written_back_in_clear_when_encrypt_errors_is_turned_off() -> None:
    with keys(OLD):
        make_rows(0, 2)
    with keys(NEW, OLD, ENCRYPT_ERRORS=False):
        assert rotation.rotate_column(WorkflowRun, "error", batch_size=10, on_batch=None).rewritten == 2
        assert dict(rotation.pending_counts())["openworkflow_run.error"] == 0
    errors = sorted((run.error for run in WorkflowRun.objects.all()), key=lambda error: error["message"])
    assert errors == [_error(0), _error(1)]  # readable with no key at all


def test_the_command_prints_progress_and_check_says_what_is_left() -> None:
    make_rows(0, 3)
    with keys(NEW):
        with pytest.raises(CommandError, match=f"{len(rotation.PAYLOAD_COLUMNS) * 3} values left"):
            workflows("rotate-keys", "--check")
        out = workflows("rotate-keys", "--batch-size", "2")
        assert "openworkflow_run.input: 2 re-encrypted" in out and "openworkflow_run.input: 3 re-encrypted" in out
        assert f"{len(rotation.PAYLOAD_COLUMNS) * 3} values re-encrypted with the first key" in out
        assert as_json("rotate-keys", "--check")["total"] == 0
    with pytest.raises(CommandError, match="not set"):
        workflows("rotate-keys")


@workflow(name="rotation-under-load")
def under_load(ctx: Any) -> Any:
    """Three steps on its input, so a worker writes journals while a pass walks the same tables."""
    first = ctx.step.run("one", lambda: {"v": ctx.input["i"] + 1, "note": "x" * 40})
    second = ctx.step.run("two", lambda: {"v": first["v"] + 1})
    return ctx.step.run("three", lambda: {"v": second["v"] + 1})


class Interrupted(Exception):
    """What a Ctrl-C between two batches does to a pass."""


def rotated_values() -> list[Any]:
    """What the fields read of make_rows()'s rows (the worker's runs aside), in primary-key order."""
    read = []
    for model, name in rotation.PAYLOAD_COLUMNS:
        rows = model.objects.order_by("pk")
        if model is WorkflowRun:
            rows = rows.filter(workflow_name="rotated")
        elif model is not Event:
            rows = rows.filter(workflow_run__workflow_name="rotated")
        read += list(rows.values_list(name, flat=True))
    return read


def test_a_pass_interrupted_and_resumed_while_a_worker_runs_loses_nothing() -> None:
    """The short version of bench/phases/rotation.py: a few hundred payloads, a worker writing beside the passes."""
    with keys(OLD):
        make_rows(0, 20)  # 20 rows in each of the 13 columns
        WorkflowRun.objects.filter(workflow_name="rotated").update(status="completed")  # not the worker's
        due = [under_load.run({"i": i}) for i in range(20)]  # due runs, their inputs under the old key
        expected = rotated_values()
    stop = threading.Event()
    with keys(NEW, OLD):
        worker = Worker(poll_interval="10ms", concurrency=4)
        thread = threading.Thread(target=worker.run, kwargs={"until": stop.is_set, "install_signal_handlers": False})
        thread.start()
        try:
            started, seen, batches = [], [], 0

            def interrupt(progress: rotation.ColumnProgress) -> None:
                nonlocal batches
                batches += 1
                seen[:] = [progress]
                started.append(under_load.run({"i": 100 + batches}))  # the worker gets work during the pass
                if batches == 3:
                    raise Interrupted

            with pytest.raises(Interrupted):
                for model, name in rotation.PAYLOAD_COLUMNS:
                    rotation.rotate_column(model, name, batch_size=10, on_batch=interrupt)
            first_pass = seen[0].rewritten
            resumed = [rotation.rotate_column(m, n, batch_size=10, on_batch=None) for m, n in rotation.PAYLOAD_COLUMNS]
            rewritten, changed = sum(p.rewritten for p in resumed), sum(p.changed for p in resumed)
            wait_until(lambda: all(handle.status() == "completed" for handle in due + started), timeout=CEILING)
        finally:
            stop.set()
            thread.join(60)
        assert not thread.is_alive()
        # Each stored value once: the 260 of make_rows and the due runs' inputs the worker had not replaced.
        assert first_pass + rewritten + changed == len(rotation.PAYLOAD_COLUMNS) * 20 + len(due)
        assert sum(count for _, count in rotation.pending_counts()) == 0
    with keys(NEW):  # the old key removed: everything reads, as written
        assert rotated_values() == expected
        for handle in due + started:
            assert handle.result(timeout=0) == {"v": WorkflowRun.objects.get(id=handle.id).input["i"] + 3}
