"""``override_openworkflow(DISPATCH=...)``: ``override_settings`` for some keys of ``OPENWORKFLOW``.

Importing this module does not need configured settings.
"""

from __future__ import annotations

from typing import Any

from django.test import override_settings


class override_openworkflow(override_settings):  # named like override_settings, which it is
    """Override some keys of ``settings.OPENWORKFLOW``; the others keep their values.

    ``override_settings(OPENWORKFLOW={"DISPATCH": ...})`` replaces the whole
    dict, as it does any setting: a ``DATABASE`` naming the workflow
    tables' alias is gone with the rest. This merges instead, with the
    ``OPENWORKFLOW`` in effect when the override is entered (when it is made,
    for a decorated ``TestCase`` class, as ``override_settings`` does)::

        @override_openworkflow(DISPATCH="django_openworkflow.testing.EagerDispatcher")
        class SignupTests(TestCase): ...

    A decorator, a context manager, or ``enable()``/``disable()``, as
    ``override_settings``.
    """

    def __init__(self, **options: Any) -> None:
        self.openworkflow_options = options
        super().__init__(OPENWORKFLOW=self._merged())

    def _merged(self) -> dict[str, Any]:
        from django.conf import settings

        current = (getattr(settings, "OPENWORKFLOW", None) or {}) if settings.configured else {}
        return {**current, **self.openworkflow_options}

    def enable(self) -> None:
        self.options = {"OPENWORKFLOW": self._merged()}
        super().enable()
