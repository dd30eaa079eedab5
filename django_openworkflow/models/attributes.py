"""Typed run attributes: one row per (run, name), the value in its type's column (``definitions/attributes.py``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import models
from django.utils.translation import gettext_lazy as _

from .runs import WorkflowDatabaseManager, WorkflowRun

VALUE_COLUMNS = ("int_value", "str_value", "decimal_value", "datetime_value")
"""One column per supported type; a row fills the one of its attribute's type and leaves the others NULL."""


class RunAttribute(models.Model):
    """A run's value of a declared attribute; deleted with its run.

    A table of its own, not columns of the run: the run row is the claim's
    hot path, and a run has any number of attributes. Each type has its
    column and its (name, value) index, so a filter compares and orders
    values as their type on every database.
    """

    id = models.BigAutoField(primary_key=True)
    workflow_run = models.ForeignKey(WorkflowRun, on_delete=models.CASCADE, related_name="attributes")
    name = models.CharField(max_length=63)
    int_value = models.BigIntegerField(null=True, blank=True)
    str_value = models.CharField(max_length=255, null=True, blank=True)
    decimal_value = models.DecimalField(max_digits=15, decimal_places=6, null=True, blank=True)
    datetime_value = models.DateTimeField(null=True, blank=True)
    position = models.IntegerField(
        help_text="Where ctx.set_attribute stands in the run's execution (-1: set at the start); "
        "a replay's earlier position replaces nothing."
    )

    objects: WorkflowDatabaseManager[Any] = WorkflowDatabaseManager()

    class Meta:
        db_table = "openworkflow_run_attribute"
        verbose_name = _("run attribute")
        verbose_name_plural = _("run attributes")
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["workflow_run", "name"], name="owf_attribute_run_name_uniq")]
        indexes = [
            models.Index(fields=["name", column], name=f"owf_attr_{column.partition('_')[0]}_idx")
            for column in VALUE_COLUMNS
        ]

    def __str__(self) -> str:
        return f"{self.name} of {self.workflow_run_id}"

    @property
    def value(self) -> Any:
        """The value, from whichever column holds it; a Decimal without the column's trailing zeros (10.25)."""
        for column in VALUE_COLUMNS:
            found = getattr(self, column)
            if isinstance(found, Decimal):
                return Decimal(format(found.normalize(), "f"))
            if found is not None:
                return found
        return None
