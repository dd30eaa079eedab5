"""A task's form as JSON Schema: what ``GET approvals`` publishes for each task that asks for a form.

One property per field of the form, with its type, its bounds, its choices,
its label as ``title``, its help text as ``description`` and its initial
value as ``default``; the required fields listed; no other property
allowed (``POST approvals/{id}/submit`` refuses them). The form itself
still decides: the schema says what it takes, its ``clean()`` may refuse
more (400 ``invalid_form``, with its errors). A file field is an object
(``name``, ``content_base64``, ``content_type``): the API reads JSON only.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db import models
from django.forms.utils import pretty_name

from ..conf import owf_settings
from ..definitions.forms import json_safe
from ..errors import PayloadError
from ..task_files import NAME_LENGTH

INTEGER_FIELDS = (models.AutoField, models.IntegerField)


def form_schema(form: forms.BaseForm) -> dict[str, Any]:
    """The JSON Schema of an unbound ``form``'s fields (its initial values as defaults)."""
    properties = {}
    for name, field in form.fields.items():
        schema = _field_schema(field)
        schema["title"] = str(field.label) if field.label is not None else pretty_name(name)
        if field.help_text:
            schema["description"] = " ".join(part for part in (schema.get("description"), str(field.help_text)) if part)
        if field.disabled:
            schema["readOnly"] = True
        initial = form.get_initial_for_field(field, name)
        if initial not in (None, "", [], ()):
            try:
                schema["default"] = json_safe(initial, f"initial value of {name!r}")
            except PayloadError:  # an initial value JSON cannot hold (a callable's object): left out
                pass
        properties[name] = schema
    required = [name for name, field in form.fields.items() if field.required and not field.disabled]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _field_schema(field: forms.Field) -> dict[str, Any]:
    """One field's schema, by its class (the most specific first: FloatField and DecimalField are IntegerFields)."""
    if isinstance(field, forms.FileField):
        return _file_schema(field)
    if isinstance(field, forms.ModelMultipleChoiceField):
        return {"type": "array", "items": _key(field), "uniqueItems": True, "description": _model(field, "keys")}
    if isinstance(field, forms.ModelChoiceField):
        return {**_key(field, nullable=not field.required), "description": _model(field, "key")}
    if isinstance(field, forms.MultipleChoiceField):
        return {"type": "array", "items": {"enum": _choices(field)}, "uniqueItems": True}
    if isinstance(field, forms.ChoiceField):
        return {"enum": _choices(field)}
    if isinstance(field, forms.NullBooleanField):
        return {"type": ["boolean", "null"]}
    if isinstance(field, forms.BooleanField):
        return {"type": "boolean"}
    if isinstance(field, forms.DecimalField):
        digits = f"at most {field.max_digits} digits" if field.max_digits is not None else ""
        places = f"{field.decimal_places} after the point" if field.decimal_places is not None else ""
        said = ", ".join(part for part in (digits, places) if part)
        return {
            "type": ["string", "number"],
            **_bounds(field),
            "description": 'a decimal number, exact as a string ("12.50")' + (f": {said}" if said else ""),
        }
    if isinstance(field, forms.FloatField):
        return {"type": "number", **_bounds(field)}
    if isinstance(field, forms.IntegerField):
        return {"type": "integer", **_bounds(field)}
    times: tuple[tuple[type[forms.Field], str], ...] = (
        (forms.DateTimeField, "date-time"),
        (forms.DateField, "date"),
        (forms.TimeField, "time"),
    )
    for kind, format_ in times:
        if isinstance(field, kind):
            return {"type": "string", "format": format_}
    if isinstance(field, forms.DurationField):
        return {"type": "string", "description": 'a duration: "1 02:03:04" (days hours:minutes:seconds) or ISO 8601'}
    if isinstance(field, forms.JSONField):
        return {"description": "any JSON value"}
    if isinstance(field, forms.CharField):  # EmailField, URLField, SlugField ... are CharFields
        schema: dict[str, Any] = {"type": "string"}
        texts: tuple[tuple[type[forms.Field], str], ...] = (
            (forms.EmailField, "email"),
            (forms.URLField, "uri"),
            (forms.UUIDField, "uuid"),
        )
        for kind, format_ in texts:
            if isinstance(field, kind):
                schema["format"] = format_
        if field.max_length is not None:
            schema["maxLength"] = field.max_length
        if field.min_length is not None:
            schema["minLength"] = field.min_length
        return schema
    return {"description": f"a {type(field).__name__}"}


def _file_schema(field: forms.FileField) -> dict[str, Any]:
    """A file, sent as JSON: its name, its content in base64, and its media type if the client knows it."""
    largest = owf_settings.task_file_max_bytes
    name: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": NAME_LENGTH}
    if field.max_length is not None:
        name["maxLength"] = min(field.max_length, NAME_LENGTH)
    what = "an image" if isinstance(field, forms.ImageField) else "a file"
    limit = f", of at most {largest} bytes" if largest is not None else ""
    return {
        "type": "object",
        "properties": {
            "name": name,
            "content_base64": {"type": "string", "contentEncoding": "base64"},
            "content_type": {"type": "string", "description": "its media type; guessed from the name if left out"},
        },
        "required": ["name", "content_base64"],
        "additionalProperties": False,
        "description": f"{what}{limit}, its content in base64; the run receives a reference to where it was saved",
    }


def _bounds(field: Any) -> dict[str, Any]:
    bounds = {}
    if field.min_value is not None:
        bounds["minimum"] = json_safe(field.min_value, "min_value")
    if field.max_value is not None:
        bounds["maximum"] = json_safe(field.max_value, "max_value")
    return {name: float(value) if isinstance(value, str) else value for name, value in bounds.items()}


def _choices(field: forms.ChoiceField) -> list[Any]:
    """The values of a field's choices, the groups' flattened."""
    values: list[Any] = []
    choices: Any = field.choices  # normalized to a list of pairs by the field
    for value, label in choices:
        if isinstance(label, list | tuple):  # a group: (name, [(value, label), ...])
            values.extend(inner for inner, _ in label)
        else:
            values.append(value)
    return [json_safe(value, "choice") for value in values]


def _key(field: forms.ModelChoiceField, nullable: bool = False) -> dict[str, Any]:
    """The schema of a model's key (its primary key, or the field ``to_field_name`` names)."""
    assert field.queryset is not None
    meta = field.queryset.model._meta
    key = meta.get_field(field.to_field_name) if field.to_field_name else meta.pk
    kind = "integer" if isinstance(key, INTEGER_FIELDS) else "string"
    return {"type": [kind, "null"] if nullable else kind}


def _model(field: forms.ModelChoiceField, what: str) -> str:
    assert field.queryset is not None
    meta = field.queryset.model._meta
    return f"the {what} of {meta.verbose_name_plural if what == 'keys' else meta.verbose_name} ({meta.label})"
