"""Large payloads (offload.py, store/payload_files.py): compressed, offloaded to a storage, read back, deleted.

Each test runs a real (in-process) worker on the test database where it
needs one, and looks at the storage's files on disk and the tables' raw
rows, not through the fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core import checks
from django.core.files.storage import FileSystemStorage
from django.core.management.base import CommandError
from django.db import transaction
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone

from django_openworkflow import RetryPolicy, forget, offload, workflow
from django_openworkflow.client import operations
from django_openworkflow.conf import owf_settings
from django_openworkflow.encryption import MissingFile
from django_openworkflow.errors import OperationRefused, PayloadFileMissing
from django_openworkflow.models import Event, StepAttempt, WorkflowRun
from django_openworkflow.offload import COMPRESSED_PREFIX, REFERENCE_PREFIX
from django_openworkflow.store import get_backend, payload_files, rotation
from django_openworkflow.store.prune import Expired, delete_batch, delete_events
from tests.cli.helpers import as_json, workflows
from tests.fixtures.testapp.models import Order
from tests.test_encryption import KEY_A, KEY_B, encrypted, offloaded_to, tables_holding

pytestmark = pytest.mark.django_db(transaction=True)

MARKER = "Zq7xMarkerOfOffload"
BIG = "x" * 5000  # above the tests' threshold (1,000 bytes), and compressible


@workflow(name="offload-big", retry_policy=RetryPolicy(maximum_attempts=1))
def big(ctx: Any) -> Any:
    made = ctx.step.run("make", lambda: {"note": MARKER, "padding": ctx.input["padding"]})
    small = ctx.step.run("small", lambda: "small")
    return {"made": made, "small": small}


def files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def offloading(root: Path, **more: Any) -> Any:
    return offloaded_to(root, 1000, **more)


def test_large_values_go_to_files_small_ones_stay_and_all_read_back(run_worker: Any, tmp_path: Path) -> None:
    with offloading(tmp_path):
        handle = big.run({"padding": BIG})
        run_worker(until=lambda: handle.status() == "completed")
        assert handle.result() == {"made": {"note": MARKER, "padding": BIG}, "small": "small"}
        # The input, the step's result and the output are offloaded; the small step's result stays in its row.
        assert len(files(tmp_path)) == 3 and sum(MARKER.encode() in path.read_bytes() for path in files(tmp_path)) == 2
        assert tables_holding(MARKER) == [] and tables_holding('"small"') == ["openworkflow_step_attempt"]
        assert WorkflowRun.objects.get(id=handle.id).input == {"padding": BIG}


def test_plain_compressed_encrypted_and_offloaded_values_coexist(tmp_path: Path) -> None:
    now = timezone.now()

    def make(name: str) -> Any:
        return WorkflowRun.objects.create(workflow_name=name, input={"padding": BIG, "name": name}, available_at=now)

    written = [make("plain").id]
    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_COMPRESSION": 100}):
        written.append(make("compressed").id)
    with encrypted(KEY_A, PAYLOAD_COMPRESSION=100):
        written.append(make("compressed and encrypted").id)
    with offloading(tmp_path):
        written.append(make("offloaded").id)
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A], PAYLOAD_COMPRESSION=100):
        written.append(make("all three").id)  # compressed under 1,000 bytes: not offloaded
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A]):
        written.append(make("encrypted and offloaded").id)
        stored = dict(WorkflowRun.objects.values_list("workflow_name", "input"))
        assert all(stored[name] == {"padding": BIG, "name": name} for name in stored)  # read whatever the form
    assert len(files(tmp_path)) == 2
    raw = repr(tables_holding(COMPRESSED_PREFIX)), repr(tables_holding(REFERENCE_PREFIX))
    assert "openworkflow_run" in raw[0] and "openworkflow_run" in raw[1]
    assert len(BIG) * 2 > len(repr(WorkflowRun.objects.filter(workflow_name="compressed").values_list("input")))


def test_a_missing_file_is_shown_as_such_and_its_run_fails_once(
    run_worker: Any, tmp_path: Path, admin_client: Client
) -> None:
    with offloading(tmp_path):
        done = big.run({"padding": BIG})
        run_worker(until=lambda: done.status() == "completed")
        waiting = big.run({"padding": BIG})  # not claimed yet
        for path in files(tmp_path):
            path.unlink()

        run = WorkflowRun.objects.get(id=done.id)
        assert isinstance(run.output, MissingFile) and "is missing from the storage 'payloads'" in run.output
        page = admin_client.get(f"/admin/django_openworkflow/workflowrun/{done.id}/change/")
        assert page.status_code == 200 and "is missing from the storage" in page.text
        assert "<the payload's file openworkflow/payloads/" in workflows("show", str(done.id))
        with pytest.raises(PayloadFileMissing, match="is missing"):
            done.result(timeout=0)
        with pytest.raises(OperationRefused, match="is missing"):
            operations.rerun(done.id)
        with pytest.raises(ValueError, match="file is missing cannot be stored again"):
            WorkflowRun.objects.filter(id=waiting.id).update(output=run.output)

        # The worker fails the run it cannot read, once: no retry, no loop.
        run_worker(until=lambda: waiting.status() == "failed")
        failed = WorkflowRun.objects.get(id=waiting.id)
        assert failed.error["type"] == "PayloadFileMissing" and "restore the file" in failed.error["message"]
        assert failed.attempts == 1 and not StepAttempt.objects.filter(workflow_run_id=waiting.id).exists()


def test_retention_deletes_the_files_once_its_transaction_commits(run_worker: Any, tmp_path: Path) -> None:
    with offloading(tmp_path):
        handle = big.run({"padding": BIG})
        run_worker(until=lambda: handle.status() == "completed")
        Event.objects.create(event_type="e", payload={"padding": BIG})
        before = files(tmp_path)
        assert len(before) == 4
        expired = Expired(None, timezone.now())

        # A delete that rolls back keeps its files: they are deleted only on commit.
        with pytest.raises(RuntimeError), transaction.atomic(using=owf_settings.database):
            assert delete_batch(get_backend(), expired, 10)
            raise RuntimeError("rolled back")
        assert files(tmp_path) == before and WorkflowRun.objects.filter(id=handle.id).exists()

        assert delete_batch(get_backend(), expired, 10) == {"offload-big": 1}
        assert len(files(tmp_path)) == 1  # the event's, deleted by the events' own prune
        assert delete_events(get_backend(), timezone.now(), 10) == 1
        assert files(tmp_path) == []


def test_forget_deletes_the_subjects_files_only(run_worker: Any, tmp_path: Path) -> None:
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A]):
        alpha, bravo = Order.objects.create(reference="alpha"), Order.objects.create(reference="bravo")
        forgotten = big.run({"padding": BIG}, subject=alpha)
        kept = big.run({"padding": BIG + "kept"}, subject=bravo)
        run_worker(until=lambda: forgotten.status() == kept.status() == "completed")
        kept_files = set(payload_files.references_of_runs([kept.id]))
        assert len(files(tmp_path)) == 6 and len(kept_files) == 3

        assert forget(alpha).erased == [forgotten.id]
        remaining = {f"{REFERENCE_PREFIX}payloads:{path.relative_to(tmp_path)}" for path in files(tmp_path)}
        assert remaining == kept_files
        assert kept.result()["made"]["padding"] == BIG + "kept"


def test_orphaned_files_are_listed_then_deleted(tmp_path: Path) -> None:
    with offloading(tmp_path):
        run = WorkflowRun.objects.create(workflow_name="kept", input={"padding": BIG}, available_at=timezone.now())
        with (
            pytest.raises(RuntimeError),
            transaction.atomic(using=owf_settings.database),
        ):  # a value written by a transaction rolled back
            WorkflowRun.objects.create(workflow_name="gone", input={"padding": BIG}, available_at=timezone.now())
            raise RuntimeError("rolled back")
        assert len(files(tmp_path)) == 2
        assert as_json("payload-files", "--older-than", "1h") == {
            "storage": "payloads", "orphans": [], "deleted": 0, "younger": 1
        }  # fmt: skip
        with pytest.raises(CommandError, match="1 orphaned file"):
            workflows("payload-files", "--older-than", "1ms")
        assert "1 orphaned file deleted" in workflows("payload-files", "--older-than", "1ms", "--delete")
        assert len(files(tmp_path)) == 1 and WorkflowRun.objects.get(id=run.id).input == {"padding": BIG}
    with pytest.raises(CommandError, match="name the storage"):
        workflows("payload-files")


def test_rotation_re_encrypts_offloaded_values_and_deletes_the_old_files(tmp_path: Path) -> None:
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A]):
        for i in range(3):
            WorkflowRun.objects.create(workflow_name="r", input={"i": i, "padding": BIG}, available_at=timezone.now())
        old = files(tmp_path)
        old_key = json.loads(old[0].read_bytes()).split(":")[2]
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_B, KEY_A]):
        assert dict(rotation.pending_counts())["openworkflow_run.input"] == 3
        assert rotation.rotate_column(WorkflowRun, "input", batch_size=2, on_batch=None).rewritten == 3
        assert dict(rotation.pending_counts())["openworkflow_run.input"] == 0
        assert rotation.rotate_column(WorkflowRun, "input", batch_size=2, on_batch=None).rewritten == 0
    new = files(tmp_path)
    assert len(new) == 3 and not set(new) & set(old)
    assert all(json.loads(path.read_bytes()).split(":")[2] != old_key for path in new)
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_B]):
        assert sorted(run.input["i"] for run in WorkflowRun.objects.all()) == [0, 1, 2]


@pytest.mark.parametrize(
    ("more", "says"),
    [
        ({"PAYLOAD_COMPRESSION": 0}, "PAYLOAD_COMPRESSION'] must be a size in bytes"),
        ({"PAYLOAD_OFFLOAD": "payloads"}, "must be None or a dict"),
        ({"PAYLOAD_OFFLOAD": {"STORAGE": "nowhere"}}, "'nowhere', which settings.STORAGES does not define"),
        ({"PAYLOAD_OFFLOAD": {"STORAGE": "default", "THRESHOLD": "1MB"}}, r"\['THRESHOLD'\] must be a size"),
        ({"TASK_FILES_STORAGE": "nowhere"}, r"TASK_FILES_STORAGE'\] must be an alias of settings.STORAGES"),
        ({"TASK_FILE_MAX_BYTES": "10MB"}, r"TASK_FILE_MAX_BYTES'\] must be a whole number of at least 1"),
    ],
)
def test_the_check_names_a_setting_it_cannot_use(more: dict[str, Any], says: str) -> None:
    from django_openworkflow.checks import check_offload

    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, **more}):
        [error] = check_offload()
    assert error.id == "openworkflow.E052" and isinstance(error, checks.Error)
    assert pytest.importorskip("re").search(says, error.msg)
    assert check_offload() == []


def test_a_rotation_that_loses_its_compare_and_set_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_A]):
        run = WorkflowRun.objects.create(workflow_name="r", output={"padding": BIG}, available_at=timezone.now())
    needs_writing = rotation._needs_writing

    def a_worker_writes_first(value: Any, ring: Any, is_error: bool) -> Any:
        WorkflowRun.objects.filter(id=run.id).update(output={"padding": BIG, "by": "the worker"})
        return needs_writing(value, ring, is_error)

    monkeypatch.setattr(rotation, "_needs_writing", a_worker_writes_first)
    with offloading(tmp_path, PAYLOAD_ENCRYPTION=[KEY_B, KEY_A]):
        progress = rotation.rotate_column(WorkflowRun, "output", batch_size=10, on_batch=None)
        assert (progress.rewritten, progress.changed) == (0, 1)
        assert WorkflowRun.objects.get(id=run.id).output == {"padding": BIG, "by": "the worker"}
        # The worker's file, and the first one (replaced by the worker's write: an orphan for payload-files).
        referenced = payload_files.all_references()
        assert len(referenced) == 1 and len(files(tmp_path)) == 2
        assert as_json("payload-files", "--older-than", "1ms", "--delete")["deleted"] == 1
        assert len(files(tmp_path)) == 1


class UndatedStorage(FileSystemStorage):
    """A storage that cannot tell when a file was modified (Django's base Storage raises so)."""

    def get_modified_time(self, name: str) -> Any:
        raise NotImplementedError("no modified times here")


def test_a_file_the_storage_fails_to_delete_is_logged_and_the_others_are_deleted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with offloading(tmp_path):
        run = WorkflowRun.objects.create(workflow_name="kept", input={"padding": BIG}, available_at=timezone.now())
        (reference,) = payload_files.references_of_runs([run.id])
        gone_alias = f"{REFERENCE_PREFIX}no-such-storage:openworkflow/payloads/x.json"  # removed from STORAGES
        with caplog.at_level("ERROR", logger="django_openworkflow.offload"):
            assert offload.delete_files([gone_alias, reference]) == 1
        assert files(tmp_path) == []  # the second was deleted all the same
        assert "could not delete the payload file" in caplog.text and "no-such-storage" in caplog.text


def test_payload_files_keeps_the_files_of_a_storage_without_modified_times(tmp_path: Path) -> None:
    undated = {"BACKEND": f"{__name__}.UndatedStorage", "OPTIONS": {"location": tmp_path}}
    with offloading(tmp_path), override_settings(STORAGES={**settings.STORAGES, "payloads": undated}):
        with pytest.raises(RuntimeError), transaction.atomic(using=owf_settings.database):  # a file no row references
            WorkflowRun.objects.create(workflow_name="gone", input={"padding": BIG}, available_at=timezone.now())
            raise RuntimeError("rolled back")
        assert len(files(tmp_path)) == 1
        # It may be a transaction's still open: it counts as young, and --delete leaves it.
        assert as_json("payload-files", "--older-than", "1ms", "--delete") == {
            "storage": "payloads", "orphans": [], "deleted": 0, "younger": 1
        }  # fmt: skip
        assert len(files(tmp_path)) == 1
