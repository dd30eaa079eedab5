"""Priority aging with real ``runworkflows`` processes: their sweep lets a low run overtake a flood.

One worker process with one slot works through a flood of priority-2 runs,
each a short step; a priority-0 run started before them is claimed while the
flood lasts with ``PRIORITY_AGING`` on (the worker's own sweep ages it to the
ceiling, where it is the oldest), and after the whole flood without it. The
result is the order the ledger records, not a time.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from django_openworkflow.models import WorkflowRun
from tests.conftest import CEILING, wait_until
from tests.fixtures.flowapp.models import Ledger
from tests.fixtures.flowapp.workflows import ordered

pytestmark = pytest.mark.django_db(transaction=True)

FLOOD = 40


def claimed_order() -> list[Any]:
    return list(Ledger.objects.filter(event="start").order_by("id").values_list("run_id", flat=True))


def start_low_then_flood(pause: float) -> tuple[Any, list[Any]]:
    low = ordered.run({"n": 0, "pause": pause}).id
    return low, [ordered.run({"n": i, "pause": pause}, priority=2).id for i in range(1, FLOOD + 1)]


def test_with_aging_a_low_run_is_claimed_while_the_flood_lasts(workers, monkeypatch):
    # One level a second up to 2: the low run is at the ceiling within (2 - 0 + 2) s of its start (the
    # documented bound); the flood takes FLOOD x 0.2 s = 8 s of one slot.
    monkeypatch.setenv("OWF_TEST_PRIORITY_AGING", json.dumps({"every": "1s", "ceiling": 2}))
    low, flood = start_low_then_flood(pause=0.2)
    workers.start("--concurrency", "1", "--poll", "20ms")
    wait_until(lambda: Ledger.objects.filter(event="end").count() == FLOOD + 1, timeout=CEILING, interval=0.1)
    order = claimed_order()
    assert order.index(low) < FLOOD - 5, f"the low run was claimed {order.index(low) + 1}th of {FLOOD + 1}"
    # Claimed, it gave its levels back at a later sweep: finished runs show their declared priority.
    wait_until(lambda: not WorkflowRun.objects.filter(declared_priority__isnull=False).exists(), timeout=CEILING)
    assert WorkflowRun.objects.get(id=low).priority == 0


def test_without_aging_a_low_run_waits_for_the_whole_flood(workers):
    low, flood = start_low_then_flood(pause=0.01)
    proc = workers.start("--burst", "--concurrency", "1", "--poll", "20ms")
    assert proc.wait(90) == 0
    assert claimed_order() == [*flood, low]
