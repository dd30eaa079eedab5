"""One form for ``error["type"]``: a bare name for builtins, this package's exceptions and the engine's conditions.

A user's own exception class is stored as ``module.QualName``. Before 0.3.0
this package's exceptions were stored dotted too
(``"django_openworkflow.errors.StepTimeout"``); those still read back.
"""

from __future__ import annotations

import pytest

from django_openworkflow import StepFailed, StepTimeout, WorkflowFailed, workflow
from django_openworkflow.engine.interrupts import engine_error, error_from_exception
from django_openworkflow.errors import DeterminismError, error_type, normalize_error_type
from django_openworkflow.testing import drain
from django_openworkflow.worker.loop import WorkerUnhealthy


class CardDeclined(Exception):
    class Soft(Exception):
        pass


@pytest.mark.parametrize(
    ("exc", "stored"),
    [
        (ValueError("x"), "ValueError"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (StepTimeout("slow"), "StepTimeout"),
        (StepFailed("charge", {"type": "ValueError", "message": "x"}), "StepFailed"),
        (DeterminismError("changed"), "DeterminismError"),
        (WorkerUnhealthy("gone"), "WorkerUnhealthy"),  # the package's, outside errors.py
        (CardDeclined("no"), f"{__name__}.CardDeclined"),
        (CardDeclined.Soft("no"), f"{__name__}.CardDeclined.Soft"),
    ],
)
def test_the_stored_type_is_bare_for_builtins_and_the_package_and_dotted_for_yours(exc, stored):
    assert error_type(type(exc)) == stored
    assert error_from_exception(exc)["type"] == stored


def test_engine_conditions_are_bare_names_too():
    assert engine_error("LeaseExpired", "lost")["type"] == "LeaseExpired"


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("django_openworkflow.errors.StepTimeout", "StepTimeout"),  # as stored before 0.3.0
        ("django_openworkflow.errors.StepFailed", "StepFailed"),
        ("StepTimeout", "StepTimeout"),
        ("LeaseExpired", "LeaseExpired"),
        ("ValueError", "ValueError"),
        ("myapp.billing.CardDeclined", "myapp.billing.CardDeclined"),
        ("django_openworkflow_extras.X", "django_openworkflow_extras.X"),  # another package: not ours
    ],
)
def test_old_stored_types_read_as_todays(stored, read):
    assert normalize_error_type(stored) == read


@pytest.mark.django_db(transaction=True)
def test_a_step_timeout_is_stored_as_step_timeout_and_fails_the_run_as_step_failed():
    import time

    from django_openworkflow import RetryPolicy

    @workflow(name="error-type-timeout", step_retry_policy=RetryPolicy(maximum_attempts=1))
    def slow(ctx):
        ctx.step.run("nap", lambda: time.sleep(0.5), timeout="50ms")

    try:
        handle = slow.run()
        drain()
        with pytest.raises(WorkflowFailed) as failed:
            handle.result(timeout=0)
        assert failed.value.error["type"] == "StepFailed"
        (attempt,) = handle.fetch().step_attempts.all()
        assert attempt.error["type"] == "StepTimeout"  # what `error["type"] == "StepTimeout"` matches
    finally:
        from django_openworkflow.definitions.registry import registry

        registry.unregister("error-type-timeout", None)
