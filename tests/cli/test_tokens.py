"""``workflows token create|list|revoke``: the token printed once, the list without it, revoking it."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from django_openworkflow.models import ApiToken
from tests.api.test_views import API, make_user

pytestmark = pytest.mark.django_db


def token(*args: str) -> str:
    out = StringIO()
    call_command("workflows", "token", *args, stdout=out)
    return out.getvalue().strip()


def test_create_prints_the_token_once_and_it_works(django_user_model: Any) -> None:
    make_user(django_user_model, "view", name="alice")
    printed = token("create", "--user", "alice", "--name", "ci")
    *text, secret = printed.splitlines()
    row = ApiToken.objects.get()
    assert text[0] == f"Created API token {row.prefix} of alice (ci)."
    assert "cannot be shown again" in text[1]
    assert secret.startswith(row.prefix) and row.digest not in printed and secret not in row.digest
    assert Client().get(f"{API}/runs", HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200

    listed = token("list")
    assert row.prefix in listed and "alice" in listed and secret not in listed
    assert json.loads(token("list", "--json", "--user", "alice"))[0]["prefix"] == row.prefix
    assert "secret" not in json.loads(token("list", "--json"))[0]


def test_create_with_json_and_an_expiry(django_user_model: Any) -> None:
    make_user(django_user_model, name="bob")
    created = json.loads(token("create", "--json", "--user", "bob", "--name", "deploy", "--expires", "90d"))
    row = ApiToken.objects.get()
    assert created["token"].startswith(row.prefix) and created["user"] == "bob" and created["name"] == "deploy"
    assert row.expires_at is not None and created["expires_at"].startswith(row.expires_at.isoformat()[:19])
    assert timedelta(days=89) < row.expires_at - row.created_at <= timedelta(days=90)


def test_revoke_by_prefix_or_whole_token(django_user_model: Any) -> None:
    user = make_user(django_user_model, "view", name="carol")
    row, secret = ApiToken.objects.create_token(user, "ci")
    assert token("revoke", row.prefix) == f"Revoked API token {row.prefix} of carol (ci)."
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert token("revoke", secret).startswith(f"API token {row.prefix} was revoked already, at ")
    answer = Client().get(f"{API}/runs", HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "revoked_token"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("create", "--user", "nobody", "--name", "ci"), "no user 'nobody'"),
        (("revoke", "owf_0000000000"), "no API token 'owf_0000000000'"),
    ],
)
def test_errors_say_what_is_wrong(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        token(*args)


@pytest.mark.parametrize("value", ["90", "soon", "2001-01-01T00:00:00Z", "-1d"])
def test_a_bad_expiry_is_refused(django_user_model: Any, value: str, capsys: Any) -> None:
    make_user(django_user_model, name="dave")
    with pytest.raises((CommandError, SystemExit)):
        token("create", "--user", "dave", "--name", "ci", "--expires", value)
    assert ApiToken.objects.count() == 0
