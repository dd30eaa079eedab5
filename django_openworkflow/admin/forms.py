"""The admin's forms: start a run of a registered workflow, send a signal to a run.

JSON fields say where their text breaks (line and column); names and keys a
database could not store are form errors, not database errors.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django import forms
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from ..client.runs import start_run
from ..definitions.payload import check_text
from ..definitions.registry import registry
from ..errors import InvalidArgument, OpenWorkflowError, PayloadError, UnknownWorkflowError
from ..formatting import read_json

if TYPE_CHECKING:
    from django.utils.functional import _StrPromise

    StrOrPromise = str | _StrPromise

_LOCAL_INPUT = ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]


def _local_datetime_field(label: StrOrPromise, help_text: StrOrPromise) -> forms.DateTimeField:
    # A native datetime-local input: the admin's calendar widget needs JavaScript.
    return forms.DateTimeField(
        label=label,
        required=False,
        input_formats=_LOCAL_INPUT,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
        help_text=help_text,
    )


def workflow_choices() -> list[tuple[str, str]]:
    """Every registered (name, version) as a form choice; the value is JSON so a None version survives."""
    return [
        (json.dumps([spec.name, spec.version]), f"{spec.name} ({spec.version})" if spec.version else spec.name)
        for spec in registry.all()
    ]


class StartRunForm(forms.Form):
    """Start a run of a registered workflow: version, JSON input, schedule, deadline, idempotency key."""

    workflow = forms.ChoiceField(label=_("Workflow"), help_text=_("A workflow and version registered in this process."))
    input = forms.CharField(
        label=_("Input"),
        required=False,
        initial="{}",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 60, "class": "owf-json-input", "spellcheck": "false"}),
        help_text=_("JSON; leave empty for null."),
    )
    available_at = _local_datetime_field(_("Available at"), _("Start no earlier than this. Empty: now."))
    deadline_at = _local_datetime_field(
        _("Deadline at"), _("Fail the run if it has not finished by then. Empty: no deadline.")
    )
    idempotency_key = forms.CharField(
        label=_("Idempotency key"),
        required=False,
        max_length=255,
        help_text=_("Starting the same workflow with the same key again returns the first run."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["workflow"].choices = workflow_choices()  # type: ignore[attr-defined]
        zone = timezone.get_current_timezone_name()
        for name in ("available_at", "deadline_at"):
            self.fields[name].help_text = gettext("%(help)s Times are in %(zone)s.") % {
                "help": self.fields[name].help_text,
                "zone": zone,
            }

    def clean_workflow(self) -> tuple[str, str | None]:
        name, version = json.loads(self.cleaned_data["workflow"])
        return name, version

    def clean_input(self) -> Any:
        return parse_json(self.cleaned_data["input"])

    def clean_idempotency_key(self) -> str | None:
        return clean_text(self.cleaned_data["idempotency_key"], gettext("The idempotency key")) or None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        available, deadline = data.get("available_at"), data.get("deadline_at")
        if available and deadline and deadline <= available:
            self.add_error("deadline_at", gettext("The deadline must be after the start time."))
        return data

    def start(self) -> tuple[Any, bool]:
        """Start the run; returns (run id, created). Errors become form errors and return (None, False)."""
        name, version = self.cleaned_data["workflow"]
        key = self.cleaned_data["idempotency_key"]
        try:
            handle = start_run(
                name,
                self.cleaned_data["input"],
                version=version,
                available_at=self.cleaned_data["available_at"],
                deadline_at=self.cleaned_data["deadline_at"],
                idempotency_key=key,
            )
        except UnknownWorkflowError as exc:
            self.add_error("workflow", str(exc))
        except InvalidArgument as exc:
            # The error names its argument; the form's fields are named after them.
            self.add_error(exc.argument if exc.argument in self.fields else None, str(exc))
        except (OpenWorkflowError, ValueError, OverflowError) as exc:
            self.add_error(None, str(exc))
        else:
            return handle.id, handle.created
        return None, False


def parse_json(text: str) -> Any:
    """``text`` as JSON (empty: null); a ValidationError saying where it breaks otherwise."""
    text = text.strip()
    if not text:
        return None
    try:
        return read_json(text)
    except json.JSONDecodeError as exc:
        raise forms.ValidationError(
            _("Not valid JSON: %(problem)s (line %(line)s, column %(column)s)."),
            params={"problem": exc.msg, "line": exc.lineno, "column": exc.colno},
            code="json",
        ) from None
    except ValueError as exc:  # nested too deep to read
        raise forms.ValidationError(_("The JSON %(problem)s."), params={"problem": exc}, code="json") from None


def clean_text(text: str, what: str) -> str:
    """A stripped name or key; a ValidationError when no database could store it (a lone surrogate)."""
    text = text.strip()
    try:
        check_text(text, what)
    except PayloadError as exc:
        raise forms.ValidationError(str(exc), code="text") from None
    return text


class SendSignalForm(forms.Form):
    """Send a signal to one run from its page: a name, JSON data, an optional idempotency key."""

    name = forms.CharField(
        label=_("Name"),
        max_length=255,
        help_text=_("The name a wait_for_signal(...) in the workflow waits for."),
    )
    json_data = forms.CharField(
        label=_("Data"),
        required=False,
        initial="null",
        widget=forms.Textarea(attrs={"rows": 4, "cols": 60, "class": "owf-json-input", "spellcheck": "false"}),
        help_text=_("JSON; leave empty for null."),
    )
    idempotency_key = forms.CharField(
        label=_("Idempotency key"),
        required=False,
        max_length=255,
        help_text=_("Sending again with the same key delivers once."),
    )

    def clean_name(self) -> str:
        name = clean_text(self.cleaned_data["name"], gettext("The signal name"))
        if not name:
            raise forms.ValidationError(_("A signal needs a name."), code="required")
        return name

    def clean_json_data(self) -> Any:
        return parse_json(self.cleaned_data["json_data"])

    def clean_idempotency_key(self) -> str | None:
        return clean_text(self.cleaned_data["idempotency_key"], gettext("The idempotency key")) or None
