"""The suite's flush after a transactional test (tests/conftest.py) still tells post_migrate's other receivers."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db.models.signals import post_migrate


@pytest.mark.django_db(transaction=True)
def test_a_flush_sends_post_migrate_when_a_receiver_other_than_djangos_listens() -> None:
    # conftest skips the signal when its only receivers are Django's content-type and permission
    # handlers, which would find every row in place; any other receiver may need it.
    heard: list[str] = []

    def receiver(sender: Any, using: str, **kwargs: Any) -> None:
        heard.append(using)

    post_migrate.connect(receiver, weak=False)
    try:
        call_command("flush", verbosity=0, interactive=False, database="default")
    finally:
        post_migrate.disconnect(receiver)
    assert "default" in heard
