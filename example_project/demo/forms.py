"""The demo's human-task form: what a support agent fills in for a refund (``refund-request``)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms


class RefundDetailsForm(forms.Form):
    amount = forms.DecimalField(max_digits=8, decimal_places=2, min_value=Decimal("0.01"))
    reason = forms.ChoiceField(choices=[("damaged", "Damaged"), ("late", "Late"), ("other", "Other")])
    note = forms.CharField(required=False, help_text="Required when the reason is Other")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("reason") == "other" and not data.get("note"):
            raise forms.ValidationError("Say why in the note.")
        return data
