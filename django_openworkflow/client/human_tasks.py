"""Human tasks that ask for a form (``ctx.wait_for_input``): the form shown, validated and delivered once.

The admin's Inbox, the API and the test helpers come through here, on the
checks of ``approvals.py`` (who may, which kind, still open) and the
store's "first one wins". The form is the project's own Django form,
imported by the dotted path the task stored and compared with the fields
it had when the task opened (``definitions/forms.py``); it validates the
submission (its ``clean()`` included), and what it cleaned is delivered as
JSON. A form that fails any of this writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django import forms
from django.utils.datastructures import MultiValueDict

from ..definitions.forms import changed_fields, field_classes, json_safe, load_form
from ..errors import InvalidArgument, TaskFormInvalid, TaskFormUnavailable
from ..models import Approval
from ..store import get_backend
from ..store.interface import ApprovalStore
from ..store.records import ApprovalRecord
from .approvals import assigned, log_decision, still_open


def build_form(task: Approval | ApprovalRecord, data: Mapping[str, Any] | None = None) -> forms.BaseForm:
    """The task's form: unbound with the task's initial values, or bound to ``data``.

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
        return form_class(data, initial=dict(task.initial or {}))
    except TypeError as exc:  # an __init__ that wants more than data and initial
        raise TaskFormUnavailable(f"the form {task.form!r} cannot be built as Form(data, initial=...): {exc}") from None


def open_task(
    approval_id: int, user: Any, *, store: ApprovalStore | None = None
) -> tuple[ApprovalRecord, forms.BaseForm]:
    """The open task ``user`` may submit, and its unbound form; the errors of :func:`submit_task` else."""
    backend: ApprovalStore = store or get_backend()
    record = assigned(backend, approval_id, user, "input")
    still_open(backend, record)
    return record, build_form(record)


def submit_task(
    approval_id: int, user: Any, data: Mapping[str, Any], *, store: ApprovalStore | None = None
) -> dict[str, Any]:
    """Submit task ``approval_id``'s form with ``data`` as ``user``; returns what was delivered to the run.

    The submission, ``{"data", "by", "at"}``, is what the run's
    ``ctx.wait_for_input`` returns (as a ``TaskSubmission``): ``data`` is
    the form's ``cleaned_data`` as JSON. It is recorded in the run's journal
    and in Django's admin log. ``data`` is what a browser posts (a
    ``QueryDict``) or a dict of JSON values (the API, the test helpers):
    a dict names only the form's fields, a field of several values (a
    multiple choice) takes a list, and other fields one value.

    Raises :class:`~django_openworkflow.errors.TaskFormInvalid` (the form's
    errors by field), :class:`~django_openworkflow.errors.TaskFormUnavailable`
    (the form is gone or changed), and the errors of
    :func:`~django_openworkflow.decide_approval` (``WrongTaskKind`` for a
    yes/no approval); none of them delivered anything. ``store``: as for
    ``decide_approval``.
    """
    backend: ApprovalStore = store or get_backend()
    record = assigned(backend, approval_id, user, "input")
    still_open(backend, record)
    if not isinstance(data, Mapping):
        raise InvalidArgument(f"data must be a dict of the form's fields, got {type(data).__name__}", "data")
    errors: dict[str, list[str]] = {}
    if not isinstance(data, MultiValueDict):
        form_fields = build_form(record).fields
        data, errors = _from_json(form_fields, data)
    form = build_form(record, data)
    if not form.is_valid() or errors:
        errors = {**{name: [str(message) for message in messages] for name, messages in form.errors.items()}, **errors}
        said = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
        raise TaskFormInvalid(f"the form of task {record.name!r} has errors: {said}", errors, form)
    values = json_safe(form.cleaned_data, f"the data of task {record.name!r}", "data")
    submission = backend.submit_task(approval_id, user.get_username(), values)
    log_decision(backend, user, record, f"Submitted {record.name!r}")
    return submission


def _from_json(
    fields: Mapping[str, forms.Field], data: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """JSON values as the form's widgets read them, and the errors of those no field takes."""
    values: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for name, value in data.items():
        field = fields.get(name)
        if field is None:
            errors[name] = [f"unknown field {name!r:.80}; the form's fields are {', '.join(fields)}"]
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
    return values, errors
