"""Human tasks that ask for a form (``ctx.wait_for_input``): the form shown, validated and delivered once.

The admin's Inbox, the API and the test helpers come through here, on the
checks of ``approvals.py`` (who may, which kind, still open) and the
store's "first one wins". The form is the project's own Django form,
imported by the dotted path the task stored and compared with the fields
it had when the task opened (``definitions/forms.py``); it validates the
submission (its ``clean()`` included), and what it cleaned is delivered as
JSON. A form that fails any of this writes nothing. A file field's upload
is saved to a storage only once the form is valid, and delivered as a
reference to it (``task_files.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.files.base import File
from django.utils.datastructures import MultiValueDict

from .. import task_files
from ..conf import owf_settings
from ..definitions.forms import changed_fields, field_classes, json_safe, load_form
from ..definitions.payload import check_text
from ..errors import (
    ApprovalError,
    ApprovalNotAssigned,
    ApprovalNotFound,
    InvalidArgument,
    PayloadError,
    TaskFormInvalid,
    TaskFormUnavailable,
    WrongTaskKind,
)
from ..models import Approval
from ..store import get_backend
from ..store.interface import ApprovalStore
from ..store.records import ApprovalRecord
from .approvals import assigned, log_decision, still_open


def build_form(
    task: Approval | ApprovalRecord,
    data: Mapping[str, Any] | None = None,
    files: MultiValueDict[str, Any] | None = None,
) -> forms.BaseForm:
    """The task's form: unbound with the task's initial values, or bound to ``data`` (and ``files``, if any).

    Raises :class:`~django_openworkflow.errors.TaskFormUnavailable` when the
    form no longer imports, a field the task opened with is gone or of
    another class, or the class cannot be built as ``Form(data, initial=...)``.
    """
    form_class = load_form(task.form)
    changes = changed_fields(task.form_fields, field_classes(form_class))
    if changes:
        raise TaskFormUnavailable(
            f"the form {task.form!r} changed since task {task.name!r} opened ({'; '.join(changes)}): "
            "nothing can be submitted until a compatible form is deployed"
        )
    try:
        if files:
            return form_class(data, files, initial=dict(task.initial or {}))
        return form_class(data, initial=dict(task.initial or {}))
    except TypeError as exc:  # an __init__ that wants more than data and initial
        raise TaskFormUnavailable(f"the form {task.form!r} cannot be built as Form(data, initial=...): {exc}") from None


def open_task(
    approval_id: int, user: Any, *, store: ApprovalStore | None = None
) -> tuple[ApprovalRecord, forms.BaseForm]:
    """The open task ``user`` may submit, and its unbound form; the errors of :func:`submit_task` else."""
    backend: ApprovalStore = store or get_backend()
    record = assigned(backend, approval_id, user, "input")
    still_open(backend, record, user.get_username())
    return record, build_form(record)


def submit_task(
    approval_id: int,
    user: Any,
    data: Mapping[str, Any],
    *,
    files: Mapping[str, Any] | None = None,
    store: ApprovalStore | None = None,
) -> dict[str, Any]:
    """Submit task ``approval_id``'s form with ``data`` as ``user``; returns what was delivered to the run.

    The submission, ``{"data", "by", "at"}``, is what the run's
    ``ctx.wait_for_input`` returns (as a ``TaskSubmission``): ``data`` is
    the form's ``cleaned_data`` as JSON. It is recorded in the run's journal
    and in Django's admin log. ``data`` is what a browser posts (a
    ``QueryDict``) or a dict of JSON values (the API, the test helpers):
    a dict names only the form's fields, a field of several values (a
    multiple choice) takes a list, and other fields one value.

    A file field takes a file: in ``files`` (what a browser uploads,
    ``request.FILES``), or in a dict ``data`` as a Django ``File`` (an
    ``UploadedFile``) or as JSON, ``{"name", "content_base64",
    "content_type"?}``. Once the form is valid, each file is saved to the
    storage ``OPENWORKFLOW["TASK_FILES_STORAGE"]`` names and the run receives
    a reference to it in its place (``task_files.py``); a file larger than
    ``TASK_FILE_MAX_BYTES`` is the field's error. A submission refused
    leaves no file behind.

    Raises :class:`~django_openworkflow.errors.TaskFormInvalid` (the form's
    errors by field), :class:`~django_openworkflow.errors.TaskFormUnavailable`
    (the form is gone or changed), :class:`~django_openworkflow.errors.TaskClaimed`
    (someone else claimed it; it names them), and the errors of
    :func:`~django_openworkflow.decide_approval` (``WrongTaskKind`` for a
    yes/no approval); none of them delivered anything. ``store``: as for
    ``decide_approval``.
    """
    backend: ApprovalStore = store or get_backend()
    record = assigned(backend, approval_id, user, "input")
    still_open(backend, record, user.get_username())
    if not isinstance(data, Mapping):
        raise InvalidArgument(f"data must be a dict of the form's fields, got {type(data).__name__}", "data")
    if files is not None and not isinstance(files, Mapping):
        raise InvalidArgument(f"files must be a dict of the form's file fields, got {type(files).__name__}", "files")
    errors: dict[str, list[str]] = {}
    uploads: MultiValueDict[str, Any] = MultiValueDict()
    given: Mapping[str, Any] = files or {}
    for name in given:
        uploads.setlist(name, given.getlist(name) if isinstance(given, MultiValueDict) else [given[name]])
    form_fields = build_form(record).fields
    if not isinstance(data, MultiValueDict):
        data, sent, errors = _from_json(form_fields, data)
        for name, upload in sent.items():
            uploads.setlist(name, [upload])
    errors.update(_file_errors(form_fields, uploads))
    form = build_form(record, data, uploads)
    if not form.is_valid() or errors:
        errors = {**{name: [str(message) for message in messages] for name, messages in form.errors.items()}, **errors}
        said = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
        raise TaskFormInvalid(f"the form of task {record.name!r} has errors: {said}", errors, form)
    saved: list[dict[str, Any]] = []  # this call's own: the files written so far, deleted if not delivered
    try:
        cleaned = {name: _saved(record.run_id, value, saved) for name, value in form.cleaned_data.items()}
        values = json_safe(cleaned, f"the data of task {record.name!r}", "data")
    except BaseException:  # a storage that failed on a later file: nothing delivered, the earlier ones go
        task_files.delete(saved)
        raise
    try:
        submission = backend.submit_task(approval_id, user.get_username(), values)
    except (ApprovalError, PayloadError):
        # Refused before anything was written (the store raises these inside its transaction, which rolls back):
        # no row references the files, so they go. Any other error (the database's) may have come after the
        # commit: the files stay, under the run's directory, rather than risk one a delivered submission names.
        task_files.delete(saved)
        raise
    log_decision(backend, user, record, f"Submitted {record.name!r}")
    return submission


def _saved(run_id: Any, value: Any, saved: list[dict[str, Any]]) -> Any:
    """A cleaned value with each file in it saved and replaced by its reference (appended to ``saved`` too)."""
    if isinstance(value, File):
        reference = task_files.save(run_id, value)
        saved.append(reference)
        return reference
    if isinstance(value, list | tuple) and any(isinstance(item, File) for item in value):  # a multiple-file field
        return [_saved(run_id, item, saved) for item in value]
    return value


def _file_errors(fields: Mapping[str, forms.Field], uploads: MultiValueDict[str, Any]) -> dict[str, list[str]]:
    """The errors of files sent to no file field, or larger than ``TASK_FILE_MAX_BYTES``."""
    errors: dict[str, list[str]] = {}
    for name in uploads:
        if not isinstance(fields.get(name), forms.FileField):
            errors[name] = [f"{name!r:.80} is not a file field of the form; it takes no file."]
            continue
        for upload in uploads.getlist(name):
            problem = task_files.too_large(upload)
            if problem is not None:
                errors[name] = [problem]
    return errors


def reassign_permission() -> str:
    """The permission to release a task someone else holds, and to reassign any task (superusers have it):
    ``OPENWORKFLOW["TASK_REASSIGN_PERMISSION"]``, by default ``django_openworkflow.reassign_approval``."""
    return owf_settings.task_reassign_permission


def claim_task(approval_id: int, user: Any, *, store: ApprovalStore | None = None) -> ApprovalRecord:
    """Claim approval or task ``approval_id`` for ``user``: until released, only they may decide or submit it.

    Others among its assignees still see it, claimed by ``user``. Claiming
    a task one holds already changes nothing. The claim is recorded in the
    task's activity (the run's journal shows it) and in Django's admin log.
    Returns the task as it is now. Raises
    :class:`~django_openworkflow.errors.TaskClaimed` when someone else holds
    it (naming them), :class:`~django_openworkflow.errors.ApprovalNotAssigned`
    for a user who may not decide it, :class:`~django_openworkflow.errors.WrongTaskKind`
    for an approval that needs several people's approvals, and
    :class:`~django_openworkflow.errors.ApprovalClosed` for one decided or
    timed out; none of them wrote anything. ``store``: as for
    :func:`~django_openworkflow.decide_approval`.
    """
    backend: ApprovalStore = store or get_backend()
    record = _assigned_any(backend, approval_id, user)
    _one_holder(record)
    username = user.get_username()
    if username in record.excluded:
        raise ApprovalNotAssigned(
            f"{username} may not claim approval {approval_id}: the workflow excludes them from it"
        )
    after = backend.change_claim(approval_id, "claim", username)
    if after.activity != record.activity:
        log_decision(backend, user, after, f"Claimed {record.name!r}")
    return after


def release_task(approval_id: int, user: Any, *, store: ApprovalStore | None = None) -> ApprovalRecord:
    """Release the claim on ``approval_id``: any of its assignees may then claim, decide or submit it.

    Its holder may release it, and so may a user with the
    ``django_openworkflow.reassign_approval`` permission (a superuser). A
    task nobody holds stays as it is. Recorded as a claim is; returns the
    task as it is now. Raises :class:`~django_openworkflow.errors.TaskClaimed`
    when someone else holds it and ``user`` may not reassign, and the
    errors of :func:`claim_task`.
    """
    backend: ApprovalStore = store or get_backend()
    may_reassign = may_reassign_tasks(user)
    record = backend.approval(approval_id)
    if record is None:
        raise ApprovalNotFound(f"no approval with id {approval_id}")
    username = user.get_username()
    if not may_reassign and record.claimed_by != username:
        record = _assigned_any(backend, approval_id, user)
    after = backend.change_claim(approval_id, "release", username, force=may_reassign)
    if after.activity != record.activity:
        log_decision(backend, user, after, f"Released {record.name!r} (held by {record.claimed_by})")
    return after


def reassign_task(approval_id: int, user: Any, to: Any, *, store: ApprovalStore | None = None) -> ApprovalRecord:
    """Give ``approval_id`` to the user ``to`` (a user or a username), as ``user``: it is claimed for them.

    ``user`` needs the permission ``OPENWORKFLOW["TASK_REASSIGN_PERMISSION"]``
    names, by default ``django_openworkflow.reassign_approval`` (a superuser
    has it). ``to`` must be an active user the workflow does not exclude;
    when the assignees do not name them, they are added. Recorded
    as a claim is; returns the task as it is now. Raises
    :class:`~django_openworkflow.errors.ApprovalNotAssigned` without the
    permission, :class:`~django_openworkflow.errors.InvalidArgument` for an
    unknown, inactive or excluded ``to``, and the errors of :func:`claim_task`.
    """
    backend: ApprovalStore = store or get_backend()
    if not may_reassign_tasks(user):
        raise ApprovalNotAssigned(
            f"{user.get_username() or 'this user'} may not reassign approval {approval_id}: "
            f"it takes the {reassign_permission()} permission"
        )
    record = backend.approval(approval_id)
    if record is None:
        raise ApprovalNotFound(f"no approval with id {approval_id}")
    _one_holder(record)
    if isinstance(to, str):
        check_text(to, "to")  # a NUL reaches no database query
    target = to if not isinstance(to, str) else _user_named(to)
    name = target.get_username() if target is not None else str(to)
    if target is None or not target.is_active:
        raise InvalidArgument(
            f"cannot reassign approval {approval_id} to {name!r:.80}: no active user has that username", "to"
        )
    if name in record.excluded:
        raise InvalidArgument(
            f"cannot reassign approval {approval_id} to {name}: the workflow excludes them from it", "to"
        )
    after = backend.change_claim(approval_id, "reassign", user.get_username(), to=name)
    held = f" (held by {record.claimed_by})" if record.claimed_by else ""
    log_decision(backend, user, after, f"Reassigned {record.name!r} to {name}{held}")
    return after


def may_reassign_tasks(user: Any) -> bool:
    """Whether ``user`` may release tasks others hold and reassign any task (the Inbox shows them the buttons).

    An active superuser, or an active user with the permission ``TASK_REASSIGN_PERMISSION`` names
    (:func:`reassign_permission`); a user not saved (the in-memory backend's tests) holds no permission.
    """
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if getattr(user, "is_superuser", False):
        return True
    return user.pk is not None and bool(user.has_perm(reassign_permission()))


def _assigned_any(store: ApprovalStore, approval_id: int, user: Any) -> ApprovalRecord:
    """The approval or task ``user`` may decide; :class:`ApprovalNotFound` or :class:`ApprovalNotAssigned` else."""
    record = store.approval(approval_id)
    if record is None:
        raise ApprovalNotFound(f"no approval with id {approval_id}")
    return assigned(store, approval_id, user, record.kind)


def _one_holder(record: ApprovalRecord) -> None:
    if record.required > 1:
        raise WrongTaskKind(
            f"approval {record.id} ({record.name!r}) needs {record.required} approvals from different people: "
            "it cannot be claimed by one"
        )


def _user_named(username: str) -> Any:
    from django.contrib.auth import get_user_model

    model = get_user_model()
    try:
        return model._default_manager.get_by_natural_key(username)
    except model.DoesNotExist:
        return None


def _from_json(
    fields: Mapping[str, forms.Field], data: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, File[Any]], dict[str, list[str]]]:
    """JSON values as the form's widgets read them, the files sent to file fields, and the errors of those no
    field takes."""
    values: dict[str, Any] = {}
    files: dict[str, File[Any]] = {}
    errors: dict[str, list[str]] = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None:
            errors[name] = [f"unknown field {name!r:.80}; the form's fields are {', '.join(fields)}"]
        elif isinstance(field, forms.FileField):
            if value is None:  # no file: a required field says so
                continue
            try:
                files[name] = value if task_files.is_file(value) else task_files.from_json(value)
            except ValueError as exc:
                errors[name] = [str(exc)]
        elif task_files.is_file(value):
            errors[name] = [f"{name!r:.80} is not a file field of the form; it takes no file."]
        elif isinstance(field, forms.JSONField):
            values[name] = value
        elif isinstance(value, dict):
            errors[name] = ["Enter a value, not an object."]
        elif isinstance(value, list):
            if any(isinstance(item, dict | list) for item in value):
                errors[name] = ["Enter a list of values, not of objects or lists."]
            elif isinstance(field.widget, forms.MultiWidget):  # a split field: its parts are name_0, name_1 ...
                parts = getattr(field.widget, "widgets_names", ())
                values.update(zip((name + part for part in parts), value, strict=False))
            elif isinstance(field, forms.MultipleChoiceField | forms.ModelMultipleChoiceField):
                values[name] = value
            else:
                errors[name] = ["Enter a single value, not a list."]
        else:
            values[name] = value
    return values, files, errors
