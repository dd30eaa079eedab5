"""A parent and its child ending at once lock each other's rows in opposite orders: the deadlock's victim retries.

The parent's end locks its row (the fence), then its unfinished children's
(the parent-close policy); a child's end locks its own row, then its held
parent's (to wake it). PostgreSQL and MariaDB abort one of the two; the
aborted end is written again, whole, instead of failing the slice (whose
last step would then run again). SQLite writes one transaction at a time.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction

from django_openworkflow.models import WorkflowRun
from django_openworkflow.store import get_backend
from django_openworkflow.store.records import Fence
from tests.fixtures.testapp.workflows import three_steps

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connections[get_backend().alias].vendor == "sqlite", reason="SQLite has no row locks to take in two orders"
    ),
]


def test_a_parent_ending_while_its_child_locks_both_rows_in_the_other_order_still_ends():
    backend = get_backend()
    parent = three_steps.run()
    (claimed,) = backend.claim("w", 1, timedelta(seconds=30), ("default",))
    assert claimed.run.id == parent.id
    child = WorkflowRun.objects.create(
        workflow_name="three-steps",
        input={},
        available_at=backend.now() + timedelta(hours=1),
        closes_with=parent.id,
        parent_close_policy="terminate",
    )
    WorkflowRun.objects.filter(id=parent.id).update(closes_children=True)
    child_locked, done = threading.Event(), []

    def child_ends() -> None:  # as a child's end does: its own row, then its parent's
        try:
            with transaction.atomic(using=backend.alias):
                list(WorkflowRun.objects.select_for_update().filter(id=child.id).values_list("id"))
                child_locked.set()
                time.sleep(0.5)  # the parent's end now holds its row and waits for the child's
                list(WorkflowRun.objects.select_for_update().filter(id=parent.id).values_list("id"))
            done.append("child")
        except Exception as exc:  # the database chose this one as the victim: fine, the test is the parent's
            done.append(type(exc).__name__)
        finally:
            connections.close_all()

    thread = threading.Thread(target=child_ends)
    thread.start()
    assert child_locked.wait(10)
    backend.complete_run(Fence(parent.id, "w", backend.now()), "done", None, close_children=True)
    thread.join(30)
    assert len(done) == 1
    assert WorkflowRun.objects.get(id=parent.id).status == "completed"
    assert WorkflowRun.objects.get(id=child.id).status == "canceled"  # closed by the parent's end


@pytest.mark.skipif(
    connections[get_backend().alias].vendor != "postgresql",
    reason="MariaDB's locking read locks the gap the successor's insert needs: one of the two is a deadlock's "
    "victim, and the child's retried continue finds it canceled (fenced out)",
)
def test_a_child_that_continues_as_new_while_its_parent_ends_hands_the_policy_to_its_successor():
    backend = get_backend()
    parent = three_steps.run()
    (claimed,) = backend.claim("w", 1, timedelta(seconds=30), ("default",))
    assert claimed.run.id == parent.id
    later = backend.now() + timedelta(hours=1)
    closing = {"closes_with": parent.id, "parent_close_policy": "terminate"}
    child = WorkflowRun.objects.create(workflow_name="three-steps", input={}, available_at=later, **closing)
    WorkflowRun.objects.filter(id=parent.id).update(closes_children=True)
    child_locked, successor = threading.Event(), []

    def child_continues() -> None:  # as continue_as_new does: the child ends, its successor takes its place
        try:
            with transaction.atomic(using=backend.alias):
                list(WorkflowRun.objects.select_for_update().filter(id=child.id).values_list("id"))
                child_locked.set()
                time.sleep(0.5)  # the parent's end now waits for the child's row
                WorkflowRun.objects.filter(id=child.id).update(status="continued")
                new = WorkflowRun.objects.create(
                    workflow_name="three-steps", input={}, available_at=later, continued_from_id=child.id, **closing
                )
                successor.append(new.id)
        finally:
            connections.close_all()

    thread = threading.Thread(target=child_continues)
    thread.start()
    assert child_locked.wait(10)
    backend.complete_run(Fence(parent.id, "w", backend.now()), "done", None, close_children=True)
    thread.join(30)
    assert len(successor) == 1
    # The parent's statement waited for the child's row and found it continued; the successor, inserted
    # by that same commit, is closed too.
    assert WorkflowRun.objects.get(id=successor[0]).status == "canceled"
