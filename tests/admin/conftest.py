"""Fixtures every admin test module may ask for."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Any:
    """A logged-in staff user holding only the given permissions ("view", "change", "add")."""

    def login(*actions: str) -> Any:
        user = django_user_model.objects.create_user("staff", password="pw", is_staff=True)
        for action in actions:
            user.user_permissions.add(
                Permission.objects.get(codename=f"{action}_workflowrun", content_type__app_label="django_openworkflow")
            )
        client.force_login(user)
        return client

    return login
