"""Admin pages that never carry control characters or lone surrogates raw.

Payloads are turned into plain strings and escaped by the templates, never
marked safe; what is left of odd characters is written as escapes here, on
the rendered page as a whole.
"""

from __future__ import annotations

from typing import Any

from django.template.response import TemplateResponse

from ..formatting import PAGE_TEXT, printable


class PrintableTemplateResponse(TemplateResponse):
    """A page whose control characters and lone surrogates are written as escapes (``\\x1b``, ``\\ud800``).

    Rows written before payloads were checked, or by other code, may hold a
    lone surrogate in their JSON (SQLite keeps it), which no UTF-8 response
    can carry, or control characters in names and keys. The templates leave
    none of their own, so escaping the rendered page catches every such
    character wherever a page shows it.
    """

    @property
    def rendered_content(self) -> str:
        return printable(super().rendered_content, PAGE_TEXT)


def printable_page(response: Any) -> Any:
    """Django's own page (the change list, a run's history) served as a :class:`PrintableTemplateResponse`.

    The run's ``str()`` and names appear in markup Django writes (a checkbox's
    label, the filters), so the page is escaped as a whole, like ours. A
    redirect or an already rendered response is returned as it is.
    """
    if type(response) is TemplateResponse and not response.is_rendered:
        response.__class__ = PrintableTemplateResponse  # it adds no state: only how the content renders
    return response
