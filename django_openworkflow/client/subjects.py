"""Runs that belong to the project's own objects: a run's subject, and :func:`runs_for`.

A subject is any saved model instance, kept on the run as two plain columns:
its model's label (``"shop.order"``, the concrete model's, as content types
name it) and its primary key as text. Not a foreign key: the workflow tables
may live on another database than the model, and migrations of the model
never touch them. Deleting the object leaves its runs, and their subject
columns, as they are (retention prunes them as it prunes any run).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import models

from ..definitions.payload import check_text
from ..errors import InvalidArgument, PayloadError
from ..models import WorkflowRun
from ..store import queries


class Subject(NamedTuple):
    """A run's subject as stored: the model's label (``"shop.order"``) and the primary key as text."""

    type: str
    id: str

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"

    def columns(self) -> dict[str, str]:
        """The run's columns that hold it."""
        return {"subject_type": self.type, "subject_id": self.id}


FORMAT = "app_label.model:pk"
"""How a subject is written in a filter (``?subject=shop.order:42``, ``--subject shop.order:42``)."""


def subject_of(obj: Any, what: str = "subject") -> Subject:
    """The subject a saved model instance is; :class:`InvalidArgument` naming ``what`` for anything else.

    A proxy model's instance is its concrete model's subject (as content
    types name it), so ``runs_for`` finds the same runs through either.
    """
    if isinstance(obj, Subject):
        return obj
    if not isinstance(obj, models.Model):
        raise InvalidArgument(
            f"{what} must be a saved model instance (an order, a user ...), got {type(obj).__name__} {obj!r:.80}",
            what,
        )
    if obj._state.adding or obj.pk is None:
        raise InvalidArgument(f"{what} {type(obj).__name__} is not saved yet: save it before linking runs to it", what)
    pk = str(obj.pk)
    if not 0 < len(pk) <= 255:
        raise InvalidArgument(f"{what}: the primary key of a subject is at most 255 characters, got {len(pk)}", what)
    check_text(pk, what)
    return Subject((obj._meta.concrete_model or type(obj))._meta.label_lower, pk)


def parse_subject(text: Any, what: str = "subject") -> Subject:
    """A subject written as ``app_label.model:pk`` (a filter's), checked against the installed models.

    The model must be installed (a typo finds nothing, it is told); the key
    is read as that model's primary key reads it (``007`` is ``7`` for an
    integer key, a UUID in any case is the same UUID). The object itself is
    not read: a deleted object's runs are found all the same.
    """
    if not isinstance(text, str) or ":" not in text:
        raise InvalidArgument(f"{what} must be written {FORMAT}, such as shop.order:42, got {text!r:.80}", what)
    label, _, raw_pk = text.strip().partition(":")
    try:
        check_text(text, what)
    except PayloadError as exc:
        raise InvalidArgument(str(exc), what) from None
    try:
        model = apps.get_model(label)
    except (LookupError, ValueError):
        raise InvalidArgument(
            f"{what} {text!r:.80}: {label!r:.80} is no installed model; write {FORMAT}, such as shop.order:42", what
        ) from None
    try:
        pk = model._meta.pk.to_python(raw_pk) if raw_pk else None
    except ValidationError:
        pk = None
    if pk is None or not 0 < len(str(pk)) <= 255:
        raise InvalidArgument(f"{what} {text!r:.80}: {raw_pk!r:.80} is not a primary key of {label}", what)
    return Subject((model._meta.concrete_model or model)._meta.label_lower, str(pk))


def find_subject(text: Any, what: str = "subject") -> models.Model:
    """The object ``app_label.model:pk`` names, read from its own database; :class:`InvalidArgument` if none.

    For starts that name their subject as text (``workflows start --subject``, the HTTP API).
    """
    subject = parse_subject(text, what)
    model = apps.get_model(subject.type)
    found = model._default_manager.filter(pk=subject.id).first()
    if found is None:
        raise InvalidArgument(f"{what} {text!r:.80}: there is no {subject.type} with primary key {subject.id!r}", what)
    return found


def as_subject(value: Any, what: str = "subject") -> Subject:
    """A model instance or its ``app_label.model:pk`` text, as a :class:`Subject`."""
    return parse_subject(value, what) if isinstance(value, str) else subject_of(value, what)


def runs_for(obj: models.Model | str) -> models.QuerySet[WorkflowRun]:
    """The runs linked to ``obj`` (started with ``subject=obj``), newest first, as a queryset.

    ``obj`` is a saved model instance, or its ``"app_label.model:pk"`` text
    (for an object since deleted). The queryset reads the workflow
    database (``OPENWORKFLOW["DATABASE"]``) and can be narrowed further:
    ``runs_for(order).filter(status="failed")``, ``.count()``; wrap a row's
    id in :class:`~django_openworkflow.RunHandle` to wait for it or cancel it.
    """
    subject = as_subject(obj, "obj")
    return queries.runs().filter(subject_type=subject.type, subject_id=subject.id)
