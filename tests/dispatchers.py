"""A dispatcher named by dotted path in the tests: it records the runs it was told about."""

from __future__ import annotations

from typing import Any

from django.core import checks

from django_openworkflow.client.dispatcher import Dispatcher

started: list[Any] = []


class RecordingDispatcher(Dispatcher):
    def run_started(self, run_id: Any, queue: str = "default") -> None:
        started.append(run_id)

    def check(self) -> list[checks.CheckMessage]:
        return [checks.Warning("recording dispatcher in use", id="tests.W001")]


class NotADispatcher:
    pass
