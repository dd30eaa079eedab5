"""DISPATCH names a dispatcher class by dotted path; lifecycle hooks are Django signals."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from django_openworkflow import hooks
from django_openworkflow.client.dispatcher import WorkerDispatcher, get_dispatcher
from django_openworkflow.dispatch.checks import check_dispatch
from tests.fixtures import dispatchers
from tests.fixtures.testapp.workflows import always_fails, sleeper, three_steps

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_is_the_default_dispatcher_and_a_short_name_for_its_class():
    assert type(get_dispatcher()) is WorkerDispatcher
    with override_settings(OPENWORKFLOW={"DISPATCH": "django_openworkflow.dispatch.WorkerDispatcher"}):
        assert type(get_dispatcher()) is WorkerDispatcher
        assert check_dispatch() == []


@override_settings(OPENWORKFLOW={"DISPATCH": "tests.fixtures.dispatchers.RecordingDispatcher"})
def test_a_dispatcher_named_by_dotted_path_hears_of_each_new_run_and_checks_itself():
    dispatchers.started.clear()
    first = three_steps.run(idempotency_key="once")
    again = three_steps.run(idempotency_key="once")
    assert first == again
    assert dispatchers.started == [first.id]  # once: the second start created nothing
    assert [m.id for m in check_dispatch()] == ["tests.W001"]


@pytest.mark.parametrize(
    "path", ["rq", "tests.fixtures.dispatchers.Missing", "tests.fixtures.dispatchers.NotADispatcher"]
)
def test_a_dispatcher_that_cannot_be_imported_is_a_check_error(path):
    with override_settings(OPENWORKFLOW={"DISPATCH": path}):
        messages = check_dispatch()
    assert [m.id for m in messages] == ["openworkflow.E010"]
    assert repr(path) in messages[0].msg


class Heard:
    """Receivers for every hook, recording (hook, kwargs)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.receivers = {
            name: (lambda sender, name=name, **kwargs: self.events.append((name, kwargs)))
            for name in ("run_started", "run_finished", "run_parked", "step_finished")
        }

    def __enter__(self) -> Heard:
        for name, receiver in self.receivers.items():
            getattr(hooks, name).connect(receiver, weak=False)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, receiver in self.receivers.items():
            getattr(hooks, name).disconnect(receiver)

    def names(self, run_id: Any) -> list[str]:
        return [name for name, kwargs in self.events if kwargs["run_id"] == run_id]


def test_hooks_tell_a_run_s_life_in_order(run_worker):
    with Heard() as heard:
        handle = sleeper.run({"duration": "10ms"})
        run_worker(until=lambda: handle.status() == "completed")
    assert heard.names(handle.id) == [
        "run_started",
        "step_finished",  # before
        "run_parked",  # the nap
        "step_finished",  # after
        "run_finished",
    ]
    steps = [kwargs for name, kwargs in heard.events if name == "step_finished"]
    assert [(s["step"], s["status"], s["error"]) for s in steps] == [
        ("before", "completed", None),
        ("after", "completed", None),
    ]
    assert all(s["seconds"] >= 0 for s in steps)
    (finished,) = [kwargs for name, kwargs in heard.events if name == "run_finished"]
    assert finished["status"] == "completed" and finished["workflow_name"] == "sleeper"


def test_a_failing_step_and_run_are_heard_and_a_raising_receiver_changes_nothing(run_worker, caplog):
    def broken(sender: str, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    hooks.step_finished.connect(broken, weak=False)
    try:
        with Heard() as heard:
            handle = always_fails.run()
            run_worker(until=lambda: handle.status() == "failed")
    finally:
        hooks.step_finished.disconnect(broken)
    (step,) = [kwargs for name, kwargs in heard.events if name == "step_finished"]
    assert step["status"] == "failed" and step["error"]["type"] == "ValueError"
    assert [kwargs["status"] for name, kwargs in heard.events if name == "run_finished"] == ["failed"]
    assert "receiver bug" in caplog.text


def test_a_cancel_from_any_front_door_is_heard_as_run_finished():
    with Heard() as heard:
        handle = sleeper.run()
        assert handle.cancel() is True
    (finished,) = [kwargs for name, kwargs in heard.events if name == "run_finished"]
    assert (finished["run_id"], finished["status"], finished["workflow_name"]) == (handle.id, "canceled", "sleeper")
