"""The API tokens' admin (admin/tokens.py): the token shown once on adding, the list, revoking, own tokens only."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from django_openworkflow.models import ApiToken
from tests.admin.test_i18n import data, english_words, left_in_english, localized  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db

LIST_URL = reverse("admin:django_openworkflow_apitoken_changelist")
ADD_URL = reverse("admin:django_openworkflow_apitoken_add")
TOKEN = re.compile(r"owf_[0-9a-f]{10}_[A-Za-z0-9_-]{43}")


def add(client: Client, user: Any, name: str = "ci", **extra: str) -> Any:
    form = {"user": user.pk, "name": name, "expires_at_0": "", "expires_at_1": "", **extra}
    return client.post(ADD_URL, form, follow=True)


def api_status(token: str) -> int:
    return Client().get("/workflows/api/runs", HTTP_AUTHORIZATION=f"Bearer {token}").status_code


def test_adding_shows_the_token_once_and_it_acts_as_its_user(admin_client: Client, django_user_model: Any) -> None:
    alice = django_user_model.objects.create_user("alice", is_staff=True)
    alice.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    page = add(admin_client, alice).content.decode()
    [token] = set(TOKEN.findall(page))
    row = ApiToken.objects.get()
    assert row.user == alice and row.name == "ci" and token.startswith(row.prefix)
    assert row.digest != token and token not in row.digest
    assert "cannot be shown again" in page
    assert api_status(token) == 200

    listing = admin_client.get(LIST_URL).content.decode()
    assert row.prefix in listing and "alice" in listing and not TOKEN.search(listing)
    change = admin_client.get(reverse("admin:django_openworkflow_apitoken_change", args=[row.pk])).content.decode()
    assert row.prefix in change and not TOKEN.search(change) and row.digest not in change


def test_the_revoke_action(admin_client: Client, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user("bob", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_workflowrun"))
    row, token = ApiToken.objects.create_token(user, "ci")
    kept, other = ApiToken.objects.create_token(user, "deploy")
    assert api_status(token) == 200
    answer = admin_client.post(LIST_URL, {"action": "revoke", "_selected_action": [row.pk]}, follow=True)
    assert "Revoked 1 API token." in answer.content.decode()
    row.refresh_from_db()
    kept.refresh_from_db()
    assert row.revoked and not kept.revoked
    assert api_status(token) == 401 and api_status(other) == 200


def test_the_user_of_a_token_cannot_be_changed(admin_client: Client, django_user_model: Any) -> None:
    alice = django_user_model.objects.create_user("alice")
    boss = django_user_model.objects.create_superuser("boss")
    row, _ = ApiToken.objects.create_token(alice, "ci")
    url = reverse("admin:django_openworkflow_apitoken_change", args=[row.pk])
    form = {"user": boss.pk, "name": "renamed", "expires_at_0": "", "expires_at_1": ""}
    assert admin_client.post(url, form).status_code == 302
    row.refresh_from_db()
    assert row.name == "renamed" and row.user == alice


@pytest.fixture
def token_keeper(django_user_model: Any) -> tuple[Any, Client]:
    """A staff user (not a superuser) who may add, change and view tokens, logged in."""
    user = django_user_model.objects.create_user("keeper", is_staff=True)
    for action in ("add", "change", "view"):
        user.user_permissions.add(Permission.objects.get(codename=f"{action}_apitoken"))
    client = Client()
    client.force_login(user)
    return user, client


def test_a_staff_user_manages_only_their_own_tokens(token_keeper: Any, django_user_model: Any) -> None:
    keeper, client = token_keeper
    boss = django_user_model.objects.create_superuser("boss")
    theirs, _ = ApiToken.objects.create_token(boss, "boss-ci")

    refused = add(client, boss)  # a token of a superuser would act with a superuser's permissions
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not ApiToken.objects.filter(user=boss).exclude(pk=theirs.pk).exists()

    page = add(client, keeper, "mine").content.decode()
    assert TOKEN.search(page) and ApiToken.objects.filter(user=keeper, name="mine").exists()
    listing = client.get(LIST_URL).content.decode()
    assert "mine" in listing and theirs.prefix not in listing
    change = reverse("admin:django_openworkflow_apitoken_change", args=[theirs.pk])
    elsewhere = client.get(change, follow=True)  # Django's "doesn't exist", on the admin's index
    assert elsewhere.redirect_chain and theirs.prefix not in elsewhere.content.decode()


@pytest.mark.usefixtures("localized")
def test_the_token_pages_in_french_leave_no_english(admin_client: Client, admin_user: Any) -> None:
    row, _ = ApiToken.objects.create_token(admin_user, "ci")
    pages = [LIST_URL, ADD_URL, reverse("admin:django_openworkflow_apitoken_change", args=[row.pk])]
    left = {
        url: found
        for url in pages  # the token's prefix is data, as a run's id is
        if (
            found := [
                t for t in left_in_english(admin_client, url) if english_words(t.replace(row.prefix, " "), data())
            ]
        )
    }
    assert left == {}, "English text on French pages:\n" + "\n".join(f"{u}: {t}" for u, t in left.items())
    french = admin_client.get(LIST_URL, HTTP_ACCEPT_LANGUAGE="fr").content.decode()
    assert "jetons d’API" in french and "Révoquer les jetons d’API sélectionnés" in french
