"""A run's journal (admin/journal.py): what each wait waits for, its timeout and what arrived."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.admin.helpers import XSS, make_attempt, make_run, run_url


@pytest.mark.django_db
def test_journal_shows_what_each_wait_waits_for_its_timeout_and_what_arrived(admin_client: Any) -> None:
    now = timezone.now()
    timeout = now + timedelta(days=7)
    run = make_run(status="running", started_at=now)
    ctx = {"timeout_at": timeout.isoformat()}
    make_attempt(run, "got", kind="signal", context={"signal": "approval", **ctx}, output={"signal_id": 7, "data": XSS})
    make_attempt(run, "late", kind="signal", context={"signal": "second-look", **ctx}, output={"timed_out": True})
    make_attempt(
        run,
        "paid",
        kind="event",
        context={"event": "order.paid", "match": {"order_id": 42}, **ctx},
        output={"event_id": 3, "payload": {"order_id": 42, "amount": 10}},
    )
    make_attempt(run, "open", kind="signal", status="running", finished_at=None, context={"signal": "more", **ctx})
    response = admin_client.get(run_url(run))
    html = response.content.decode()
    waits = [row.wait for row in response.context["journal"]]
    assert [w.label for w in waits] == [
        'signal "approval"',
        'signal "second-look"',
        'event "order.paid" matching {"order_id":42}',
        'signal "more"',
    ]
    assert [w.state for w in waits] == ["arrived", "timed out", "arrived", "waiting"]
    assert [w.source for w in waits] == ["signal #7", "", "event #3", ""]
    assert all(
        w.timeout and w.timeout.endswith(timeout.astimezone(timezone.get_current_timezone()).strftime("%S.%f")[:-3])
        for w in waits
    )
    assert "times out at" in html and "timed out: nothing arrived" in html
    assert "&quot;order.paid&quot; matching {&quot;order_id&quot;:42}" in html
    assert "&quot;amount&quot;: 10" in html
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The wait's raw output is not repeated as a plain step output.
    assert "signal_id" not in html and "timed_out" not in html
