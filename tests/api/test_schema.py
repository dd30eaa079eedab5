"""The HTTP API against its own OpenAPI document, by schemathesis, through Django's WSGI handler.

Schemathesis reads the served ``openapi.json`` and sends what the document
allows and what it forbids (wrong types, nulls, missing and unknown fields,
out-of-range numbers, strings that break a pattern), then checks every
answer: no 5xx, a status and body the document names, a refusal for data
the document forbids and an acceptance for data it allows, a 401 or 403
when the credentials are left out or wrong, and nothing written by a
refused request. It does so anonymously, as a staff user with every
workflow-run permission, logged in by session cookie and sending the CSRF
token, as a browser does, and with an API token of such a user (no cookie,
no CSRF token), as a script does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.conf import settings as django_settings
from django.contrib.auth.models import Permission
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client, override_settings
from hypothesis import HealthCheck, settings
from schemathesis.core.failures import Failure
from schemathesis.specs.openapi.checks import positive_data_acceptance

from django_openworkflow.api import stream
from django_openworkflow.models import ApiToken, WorkflowRun
from tests.api.test_views import written
from tests.fixtures.testapp.workflows import three_steps

pytestmark = pytest.mark.django_db(transaction=True)

API = "/workflows/api"
BASE_URL = f"http://testserver{API}"  # the host Django's test environment allows
EXAMPLES = 25
"""Examples per operation and generation mode: enough to reach every field, bounded so a run stays short."""

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20261125,  # the same requests on every run: a failure here fails again on a rerun
        "generation": {
            "mode": "all",
            "max-examples": EXAMPLES,
            "deterministic": True,
            "database": "none",
            # The staff test logs in for real; a generated session cookie would replace its own.
            "with-security-parameters": False,
        },
        "phases": {"stateful": {"enabled": False}},
    }
)
HYPOTHESIS = settings(
    max_examples=EXAMPLES,
    deadline=None,  # a busy machine answers slowly; slowness is not what this test is about
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)

# Read from the application at import: schemathesis makes one test per operation at collection time, and
# its fixture-based loader (schemathesis.pytest.from_fixture, 4.32) sets Node._nodeid, which pytest 9.2 no
# longer has. Each request goes through the whole of Django (middleware, URLs, views), in this process.
with override_settings(ALLOWED_HOSTS=["localhost"]):  # the host schemathesis's WSGI loader names
    schema = schemathesis.openapi.from_wsgi(f"{API}/openapi.json", get_wsgi_application(), config=CONFIG)


@pytest.fixture
def staff_headers(django_user_model: Any) -> dict[str, str]:
    """The headers of a staff user with every workflow-run permission: the session cookie, the CSRF token.

    Sent as headers (not kept in a cookie jar) so that schemathesis sees the
    credentials the schema's security schemes name, and checks that a request
    without them, or with a wrong one, is refused.
    """
    user = django_user_model.objects.create_user("fuzzer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_openworkflow", codename__endswith="_workflowrun")
    )
    client = Client()
    client.force_login(user)
    token = "c" * 32  # the double-submit cookie: the header repeats the cookie's token
    session = client.cookies[django_settings.SESSION_COOKIE_NAME].value
    return {
        "Cookie": f"{django_settings.SESSION_COOKIE_NAME}={session}; {django_settings.CSRF_COOKIE_NAME}={token}",
        "X-CSRFToken": token,
    }


@pytest.fixture
def token_headers(django_user_model: Any) -> dict[str, str]:
    """An API token of a user with every workflow-run permission, as the ``token`` security scheme sends it."""
    user = django_user_model.objects.create_user("script")
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="django_openworkflow", codename__endswith="_workflowrun")
    )
    _, token = ApiToken.objects.create_token(user, "schemathesis")
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def some_runs() -> list[uuid.UUID]:
    """Runs to list and to operate on: one pending, one failed (it can be retried), one scheduled for later."""
    pending = three_steps.run({"start": 1}).id
    failed = three_steps.run({"start": 2}).id
    WorkflowRun.objects.filter(id=failed).update(status="failed", error={"message": "boom"})
    later = three_steps.run({"start": 3}, available_at="1h").id
    return [pending, failed, later]


def aim_at_a_real_run(case: Any, runs: list[uuid.UUID]) -> None:
    """Most generated run ids name no run (404); send three in four of the well-formed ones to a run that exists.

    A well-formed id only: swapping a malformed one would turn a request the
    schema forbids into one it allows, and the checks would judge it wrongly.
    """
    generated = case.path_parameters.get("run_id")
    try:
        slot = uuid.UUID(str(generated)).int % (len(runs) + 1)
    except ValueError:
        return
    if slot < len(runs):
        case.path_parameters["run_id"] = str(runs[slot])


# The codes of the rules a JSON Schema cannot state (fields.py): a schema-valid request may meet them.
UNSTATABLE = {"out_of_range", "bad_payload", "bad_cursor", "bad_subject", "bad_attribute"}


def positive_data_accepted(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schemathesis's positive_data_acceptance, but for a 400 that names a rule the schema cannot state."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except Failure:
        if response.status_code == 400 and response.json()["error"]["code"] in UNSTATABLE:
            return None
        raise


@pytest.fixture(autouse=True)
def short_event_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's server-sent events end with the run or after a minute: here after a moment."""
    monkeypatch.setattr(stream, "CONNECTION_SECONDS", 0.1)


@pytest.fixture(autouse=True)
def one_connection_per_test() -> Iterator[None]:
    """The test's database connection stays open across requests, as Django's test ``Client`` keeps it.

    Schemathesis calls the WSGI application itself, whose request signals close
    the connection after every request (``CONN_MAX_AGE = 0``): on PostgreSQL and
    MariaDB, connecting again for each of some 3,000 requests was most of this
    module's time.
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def exercise(case: Any, headers: dict[str, str] | None = None) -> None:
    """Send ``case`` and check the answer; a refusal (4xx) must have written nothing."""
    before = written()
    response = case.call_and_validate(
        base_url=BASE_URL,
        headers=headers,
        excluded_checks=[positive_data_acceptance],
        additional_checks=[positive_data_accepted],
    )
    if 400 <= response.status_code < 500:
        assert written() == before, f"{response.status_code} {response.text[:300]} wrote to the database"


def exercise_as(caller: str, case: Any, headers: dict[str, str] | None) -> None:
    """``exercise``, and a failure says who sent the request."""
    try:
        exercise(case, headers)
    except BaseException as failure:
        failure.add_note(f"sent as: {caller}")
        raise


# Each generated case is sent by no one, by a staff user with every workflow-run permission (session
# cookie and CSRF token) and with an API token of such a user, in one test: schemathesis builds an
# operation's cases (its coverage phase above all) once per test it runs, most of this module's CPU,
# and the cases do not depend on who sends them.
@schema.parametrize()
@HYPOTHESIS
def test_the_api_answers_as_its_document_says(
    case: Any, staff_headers: dict[str, str], token_headers: dict[str, str], some_runs: list[uuid.UUID]
) -> None:
    exercise_as("anonymous", case, None)  # as generated: an anonymous request is refused before any lookup
    aim_at_a_real_run(case, some_runs)
    exercise_as("staff with every permission", case, staff_headers)
    exercise_as("a token with every permission", case, token_headers)
