"""API tokens: ``Authorization: Bearer`` authenticates as the token's user, without CSRF, and says what is wrong."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.test import Client
from django.utils import timezone

from django_openworkflow.api.tokens import LAST_USED_EVERY
from django_openworkflow.models import ApiToken, WorkflowRun
from tests.api.test_views import API, JSON, error_of, make_user

pytestmark = pytest.mark.django_db(transaction=True)

START = {"workflow": "three-steps", "input": {"start": 1}}


def bearer(token: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def start(client: Client, **headers: Any) -> Any:
    return client.post(f"{API}/runs", json.dumps(START), content_type=JSON, **headers)


@pytest.fixture
def csrf_client() -> Client:
    """A client that enforces CSRF as a browser's requests meet it."""
    return Client(enforce_csrf_checks=True)


@pytest.fixture
def token_of(django_user_model: Any) -> Any:
    """A new token of a new user holding the given permissions: (the user, the row, the token)."""
    count = 0

    def create(*actions: str, **options: Any) -> tuple[Any, ApiToken, str]:
        nonlocal count
        count += 1
        user = make_user(django_user_model, *actions, name=f"script-{count}")
        row, token = ApiToken.objects.create_token(user, "ci", **options)
        return user, row, token

    return create


def test_a_token_starts_a_run_without_csrf(csrf_client: Client, token_of: Any) -> None:
    user, _, token = token_of("add", "view")
    started = start(csrf_client, **bearer(token))
    assert started.status_code == 201, started.content
    assert WorkflowRun.objects.count() == 1
    read = csrf_client.get(f"{API}/runs", **bearer(token))
    assert read.status_code == 200 and len(read.json()["runs"]) == 1
    assert "sessionid" not in csrf_client.cookies  # nothing logged in: each request carries its token


def test_a_session_still_needs_the_csrf_token(csrf_client: Client, django_user_model: Any) -> None:
    csrf_client.force_login(make_user(django_user_model, "add"))
    refused = start(csrf_client)
    assert refused.status_code == 403 and error_of(refused)["code"] == "csrf_failed"
    assert WorkflowRun.objects.count() == 0


def test_a_token_has_its_users_permissions_only(csrf_client: Client, token_of: Any) -> None:
    _, _, reader = token_of("view")
    refused = start(csrf_client, **bearer(reader))
    assert refused.status_code == 403
    assert error_of(refused) == {
        "code": "permission_denied",
        "message": "this needs the django_openworkflow.add_workflowrun permission",
        "field": None,
    }
    assert csrf_client.get(f"{API}/runs", **bearer(reader)).status_code == 200
    _, _, nobody = token_of()
    assert csrf_client.get(f"{API}/workflows", **bearer(nobody)).status_code == 403
    assert WorkflowRun.objects.count() == 0


def refusal(response: Any, code: str) -> str:
    """The message of a 401 with ``code``, after checking its challenge header."""
    assert response.status_code == 401, response.content
    error = error_of(response)
    assert error["code"] == code
    assert response["WWW-Authenticate"].startswith('Bearer realm="workflows", error="invalid_token"')
    return str(error["message"])


def test_revoked_expired_unknown_and_malformed_tokens_get_401(
    csrf_client: Client, token_of: Any, django_user_model: Any
) -> None:
    _, revoked, revoked_token = token_of("add")
    ApiToken.objects.filter(pk=revoked.pk).update(revoked_at=timezone.now())
    _, _, expired_token = token_of("add", expires_at=timezone.now() - timedelta(seconds=1))
    user, _, valid = token_of("add")
    unknown = valid[:-1] + ("A" if valid[-1] != "A" else "B")  # the right prefix, the wrong secret
    _, _, stranger = token_of("add")
    ApiToken.objects.filter(prefix=stranger[:14]).delete()

    assert "was revoked at" in refusal(start(csrf_client, **bearer(revoked_token)), "revoked_token")
    assert "expired at" in refusal(start(csrf_client, **bearer(expired_token)), "expired_token")
    assert "no API token" in refusal(start(csrf_client, **bearer(unknown)), "unknown_token")
    assert "no API token" in refusal(start(csrf_client, **bearer(stranger)), "unknown_token")
    for malformed in ("", "owf_", "secret", valid + "x", valid.upper(), f"{valid} {valid}"):
        message = refusal(start(csrf_client, **bearer(malformed)), "malformed_token")
        assert "workflows token create" in message
    user.is_active = False
    user.save()
    assert "inactive" in refusal(start(csrf_client, **bearer(valid)), "inactive_user")
    assert WorkflowRun.objects.count() == 0


def test_a_bad_token_never_falls_back_to_the_session(django_user_model: Any) -> None:
    client = Client()  # CSRF not enforced: only the token can refuse these requests
    client.force_login(make_user(django_user_model, "view", "add"))
    assert client.get(f"{API}/runs").status_code == 200
    refusal(client.get(f"{API}/runs", **bearer("not-a-token")), "malformed_token")
    refusal(start(client, **bearer("owf_0123456789_" + "a" * 43)), "unknown_token")
    assert WorkflowRun.objects.count() == 0
    # Another scheme is not the API's (a proxy's Basic credentials, say): the session decides.
    assert client.get(f"{API}/runs", HTTP_AUTHORIZATION="Basic dXNlcjpwdw==").status_code == 200


def test_anonymous_requests_are_told_both_ways_in(client: Client) -> None:
    response = client.get(f"{API}/runs")
    assert response.status_code == 401 and error_of(response)["code"] == "not_authenticated"
    assert "Authorization: Bearer" in error_of(response)["message"]
    assert response["WWW-Authenticate"] == 'Bearer realm="workflows"'


def test_only_a_digest_of_the_token_is_stored(token_of: Any) -> None:
    _, row, token = token_of()
    assert token.startswith("owf_") and len(token) == 58 and token.startswith(row.prefix)
    assert row.digest == hashlib.sha256(token.encode()).hexdigest()
    stored = ApiToken.objects.filter(pk=row.pk).values().get()
    assert token not in {str(value) for value in stored.values()}
    assert not any(token[len(row.prefix) :] in str(value) for value in stored.values())
    _, other, second = token_of()
    assert second != token and other.prefix != row.prefix


def test_last_used_at_is_written_at_most_once_a_minute(csrf_client: Client, token_of: Any) -> None:
    _, row, token = token_of("view")
    assert row.last_used_at is None
    before = timezone.now()
    assert csrf_client.get(f"{API}/runs", **bearer(token)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None and row.last_used_at >= before

    recent = timezone.now() - LAST_USED_EVERY / 2
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=recent)
    assert csrf_client.get(f"{API}/runs", **bearer(token)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at == recent  # fresh enough: no write

    stale = timezone.now() - LAST_USED_EVERY * 2
    ApiToken.objects.filter(pk=row.pk).update(last_used_at=stale)
    assert csrf_client.get(f"{API}/runs", **bearer(token)).status_code == 200
    row.refresh_from_db()
    assert row.last_used_at > stale


def test_a_refused_request_still_counts_as_a_use_of_a_valid_token(csrf_client: Client, token_of: Any) -> None:
    _, row, token = token_of()  # no permission: 403, but the token itself was good
    assert csrf_client.get(f"{API}/runs", **bearer(token)).status_code == 403
    row.refresh_from_db()
    assert row.last_used_at is not None


def test_the_migration_applies_and_reverts() -> None:
    recorder = MigrationRecorder(connection)
    assert ("django_openworkflow", "0010_api_tokens") in recorder.applied_migrations()
    call_command("migrate", "django_openworkflow", "0009", verbosity=0)
    assert "openworkflow_api_token" not in connection.introspection.table_names()
    call_command("migrate", "django_openworkflow", verbosity=0)
    assert "openworkflow_api_token" in connection.introspection.table_names()
    with connection.cursor() as cursor:
        description = connection.introspection.get_table_description(cursor, "openworkflow_api_token")
    columns = {column.name for column in description}
    assert columns == {
        "id",
        "user_id",
        "name",
        "prefix",
        "digest",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    }
