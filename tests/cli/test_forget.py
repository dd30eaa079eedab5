"""``workflows forget`` (cli/forget.py): the user's permission, a refusal naming the live run, the erasure."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management.base import CommandError

from tests.api.test_views import make_user
from tests.cli.helpers import as_json, workflows
from tests.client.test_erasure import FORGET, child, waits
from tests.conftest import is_parked
from tests.fixtures.testapp.models import Order
from tests.test_encryption import tables_holding

pytestmark = pytest.mark.django_db(transaction=True)


def test_forget_on_the_command_line(run_worker: Any, django_user_model: Any) -> None:
    order = Order.objects.create(reference="cli")
    finished = child.run({"secret": FORGET}, subject=order)
    live = waits.run({}, subject=order)
    run_worker(until=lambda: finished.status() == "completed" and is_parked(live))
    make_user(django_user_model, "view", "change", name="viewer")
    make_user(django_user_model, "delete", name="dpo")
    subject = f"testapp.order:{order.pk}"

    with pytest.raises(CommandError, match="lacks the django_openworkflow.delete_workflowrun permission"):
        workflows("forget", subject, "--user", "viewer")
    with pytest.raises(CommandError, match="no user 'nobody'"):
        workflows("forget", subject, "--user", "nobody")
    with pytest.raises(CommandError, match=str(live.id)):
        workflows("forget", subject, "--user", "dpo")
    with pytest.raises(CommandError, match="is no installed model"):
        workflows("forget", "shop.nothing:1", "--user", "dpo")
    assert tables_holding(FORGET)  # nothing erased yet

    said = workflows("forget", subject, "--user", "dpo", "--cancel-live")
    assert said.strip() == f"{subject}: erased the payloads of 2 runs, 1 of them canceled first; 0 runs erased before."
    assert tables_holding(FORGET) == []
    shown = as_json("show", str(finished.id))
    assert shown["input"] is None and shown["erased"]["by"] == "dpo"
    text = workflows("show", str(finished.id))
    assert "payloads erased" in text and "by dpo" in text
    again = as_json("forget", subject, "--user", "dpo")
    assert again["erased"] == [] and set(again["already"]) == {str(finished.id), str(live.id)}
