import pytest

from tests.testapp.workflows import three_steps, sleeper


@pytest.mark.django_db(transaction=True)
def test_three_steps_complete(run_worker):
    handle = three_steps.run({"start": 2})
    run_worker()
    assert handle.status() == "completed"
    assert handle.result(timeout=1) == {"result": 21}
