"""The form of a human task (``ctx.wait_for_input(form=...)``): found by dotted path, its fields remembered.

The form is an ordinary Django ``Form`` or ``ModelForm``. A task stores its
dotted path and the class of each field it declares when it opens; when a
person submits, the form is imported again and compared with what was
stored: a form that no longer imports, or a field the task opened with that
is gone or has another class, refuses the submission
(:class:`~django_openworkflow.errors.TaskFormUnavailable`), since the
workflow waiting for it expects those fields. Fields added since are fine.

What a form cleans is stored as JSON (:func:`json_safe`): a model instance
as its primary key, a queryset as a list of them, a ``Decimal`` as its
exact text (``"12.50"``), dates, times and datetimes in ISO 8601 with
every digit kept; a file field's upload as the reference to where it was
saved (``client/human_tasks.py``, ``task_files.py``).
"""

from __future__ import annotations

from datetime import date, time
from typing import Any

from django import forms
from django.utils.module_loading import import_string

from ..errors import StepUsageError, TaskFormUnavailable
from .payload import to_json_value


def form_path(form: type[forms.BaseForm] | str) -> str:
    """The dotted path a task stores for ``form`` (a form class, or its path already); checked, not imported.

    Raises :class:`StepUsageError` for anything else.
    """
    if isinstance(form, str):
        module, _, name = form.rpartition(".")
        if not module or not name.isidentifier():
            raise StepUsageError(
                f"form must be a Form class or its dotted path ('myapp.forms.RefundForm'), got {form!r}"
            )
        return form
    if isinstance(form, type) and issubclass(form, forms.BaseForm):
        return f"{form.__module__}.{form.__qualname__}"
    raise StepUsageError(f"form must be a Django Form class or its dotted path, got {form!r}")


def load_form(path: str) -> type[forms.BaseForm]:
    """The form class at ``path``; :class:`TaskFormUnavailable` saying why when there is none."""
    try:
        found = import_string(path)
    except ImportError as exc:
        raise TaskFormUnavailable(f"the form {path!r} does not import: {exc}") from None
    if not (isinstance(found, type) and issubclass(found, forms.BaseForm)):
        raise TaskFormUnavailable(f"{path!r} is not a Django Form class but {found!r:.80}")
    return found


def opening_form(form: type[forms.BaseForm] | str) -> tuple[str, dict[str, str]]:
    """When a task opens: its form's path and the class of each field; :class:`StepUsageError` if unusable.

    The class must import by its path (a worker and the web server import it
    separately). A file field is fine: its upload is saved to a storage and
    the run receives a reference (``task_files.py``).
    """
    path = form_path(form)
    try:
        found: Any = load_form(path)
    except TaskFormUnavailable as exc:
        if isinstance(form, str):
            raise StepUsageError(str(exc)) from None
        found = None
    if isinstance(form, type) and found is not form:
        raise StepUsageError(
            f"the form {form.__qualname__} does not import as {path!r}: define it at the top level of a module"
        )
    return path, field_classes(found)


def field_classes(form: type[forms.BaseForm]) -> dict[str, str]:
    """``{field name: "module.Class"}`` of the fields the form class declares."""
    return {name: f"{type(field).__module__}.{type(field).__qualname__}" for name, field in _declared(form).items()}


def _declared(form: type[forms.BaseForm]) -> dict[str, forms.Field]:
    fields: dict[str, forms.Field] = getattr(form, "base_fields", {})  # every Form and ModelForm class has them
    return fields


def changed_fields(opened: dict[str, str], now: dict[str, str]) -> list[str]:
    """How the fields a task opened with differ now, in words: gone or of another class (added ones are fine)."""
    changes = []
    for name, kind in opened.items():
        if name not in now:
            changes.append(f"{name!r} is gone")
        elif now[name] != kind:
            changes.append(f"{name!r} was a {kind.rpartition('.')[2]} and is now a {now[name].rpartition('.')[2]}")
    return changes


def json_safe(value: Any, what: str, root: str = "value") -> Any:
    """``value`` (a form's ``cleaned_data``, a task's ``initial``) as the JSON a run stores; exact.

    A model instance becomes its primary key and a queryset a list of them
    (recognised by their ``_meta``: declarations do not import the models);
    decimals their exact text; dates, times and datetimes ISO 8601 with
    their microseconds (Django's JSON encoder would cut them to
    milliseconds). Raises :class:`~django_openworkflow.errors.PayloadError`
    for what JSON cannot hold, naming where in ``value``.
    """
    return to_json_value(_plain(value), what, root)


def _plain(value: Any) -> Any:
    if hasattr(value, "_meta") and hasattr(value, "pk") and not isinstance(value, type):  # a model instance
        return _plain(value.pk)
    if isinstance(value, date | time):  # datetimes too
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        items = [_plain(item) for item in value]
        return sorted(items, key=repr)  # a set has no order: the stored one must not depend on hashing
    if isinstance(value, list | tuple) or (hasattr(value, "model") and hasattr(value, "iterator")):  # a queryset
        return [_plain(item) for item in value]
    return value
