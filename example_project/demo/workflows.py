"""Demo workflows, autodiscovered by django_openworkflow at startup (like admin.py).

The steps only pretend to talk to the outside world; in a real project they
would create rows, call an e-mail API, and so on. Each step's return value is
stored in the journal, so after a crash or a restart the workflow replays
from the top and completed steps return their stored result instead of
running again.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.utils import timezone

from django_openworkflow import RetryPolicy, workflow


def create_account(user_id: int, email: str) -> dict[str, Any]:
    return {"user_id": user_id, "email": email, "created_at": timezone.now().isoformat()}


def send_email(to: str, template: str) -> str:
    # Pretend to hand the message to a mail provider; return its message id.
    return f"<{template}.{uuid.uuid4().hex[:12]}@mail.example.com>"


_flaky_calls: dict[int, int] = {}


def score_with_flaky_api(user_id: int) -> int:
    # Pretend the risk-scoring API times out on the first call for each user.
    _flaky_calls[user_id] = _flaky_calls.get(user_id, 0) + 1
    if _flaky_calls[user_id] == 1:
        raise TimeoutError("risk API did not answer in time")
    return 7 * user_id % 100


@workflow(name="review-account", version="v1")
def review_account(ctx: Any) -> dict[str, Any]:
    """A child workflow: score the account, retrying the flaky API with backoff."""
    score = ctx.step.run(
        "risk-score",
        lambda: score_with_flaky_api(ctx.input["user_id"]),
        retry_policy=RetryPolicy(initial_interval="200ms", maximum_attempts=3),
    )
    return {"score": score, "verdict": "ok" if score < 90 else "manual review"}


@workflow(name="onboard-user", version="v1")
def onboard_user(ctx: Any) -> dict[str, Any]:
    user_id = ctx.input["user_id"]
    email = ctx.input["email"]

    account = ctx.step.run("create-account", lambda: create_account(user_id, email))
    welcome_id = ctx.step.run("send-welcome-email", lambda: send_email(account["email"], "welcome"))

    # Durable: the worker slot is freed while the run waits, and a restart does not reset the timer.
    ctx.step.sleep("welcome-delay", ctx.input.get("delay", "2s"))

    tips_id = ctx.step.run("send-tips-email", lambda: send_email(account["email"], "tips"))

    # A child workflow: started exactly once, and this run wakes as soon as it finishes.
    review = ctx.step.run_workflow(review_account, {"user_id": user_id}, timeout="1h")
    return {"user_id": account["user_id"], "emails_sent": [welcome_id, tips_id], "review": review}


# -- an approval flow: a human decides, the run waits without holding a worker ----


def file_claim(claim: dict[str, Any]) -> dict[str, Any]:
    # Pretend to store the claim and notify the manager (with a link that sends the signal).
    return {"claim_id": f"EXP-{uuid.uuid4().hex[:8]}", "amount": claim["amount"], "employee": claim["employee"]}


def pay_claim(claim: dict[str, Any], approver: str) -> dict[str, Any]:
    return {"claim_id": claim["claim_id"], "paid": claim["amount"], "approved_by": approver}


def escalate_claim(claim: dict[str, Any], reason: str) -> dict[str, Any]:
    return {"claim_id": claim["claim_id"], "escalated_to": "finance", "reason": reason}


@workflow(name="expense-approval", version="v1")
def expense_approval(ctx: Any) -> dict[str, Any]:
    """File an expense claim, wait up to 7 days for the manager, then pay, reject or escalate.

    Send the decision from anywhere, before or after the run reaches its wait
    (a signal sent early is buffered, never lost)::

        handle.signal("manager-decision", {"approved": True, "by": "grace"})
        # or: manage.py workflows signal RUN_ID manager-decision --data '{"approved": true, "by": "grace"}'
        # or: the "Send a signal" form on the run's admin page
    """
    claim = ctx.step.run("file-claim", lambda: file_claim(ctx.input))

    # Parks the run (no worker slot held) until the signal arrives; None after the timeout.
    decision = ctx.step.wait_for_signal("manager-decision", timeout=ctx.input.get("timeout", "7d"))

    if decision is None:
        return ctx.step.run("escalate", lambda: escalate_claim(claim, "no decision within the timeout"))
    if not decision.get("approved"):
        return {"claim_id": claim["claim_id"], "rejected_by": decision.get("by"), "reason": decision.get("reason")}
    return ctx.step.run("pay", lambda: pay_claim(claim, decision.get("by", "manager")))


# -- the same with the admin's Inbox: the managers group decides, Django logs who and when ----


@workflow(name="refund-approval", version="v1")
def refund_approval(ctx: Any) -> dict[str, Any]:
    """Refund an order once someone in the "managers" group approves it in the admin's Inbox."""
    order = ctx.input
    decision = ctx.wait_for_approval(
        "refund",
        assignees=["group:managers"],
        timeout=order.get("timeout", "3d"),
        details=f"Refund {order['amount']} EUR to {order['customer']} (order {order['order_id']})",
    )
    if decision is None:
        return {"order_id": order["order_id"], "refunded": False, "reason": "no decision within 3 days"}
    if not decision.approved:
        return {"order_id": order["order_id"], "refunded": False, "rejected_by": decision.by}
    return ctx.step.run("refund", lambda: {"order_id": order["order_id"], "refunded": order["amount"]})


@workflow(name="refund-request", version="v1")
def refund_request(ctx: Any) -> dict[str, Any]:
    """A support agent fills in the refund's details (a Django form, in the Inbox), then the refund is made."""
    order = ctx.input
    details = ctx.wait_for_input(
        "refund-details",
        form="example_project.demo.forms.RefundDetailsForm",
        assignees=["group:support"],
        initial={"amount": order["total"]},
        details=f"Order {order['order_id']} for {order['customer']}: how much to refund, and why",
        timeout="3d",
        due="1d",
    )
    if details is None:
        return {"order_id": order["order_id"], "refunded": False, "reason": "nobody filled in the details"}
    amount = details.data["amount"]
    return ctx.step.run("refund", lambda: {"order_id": order["order_id"], "refunded": amount, "by": details.by})


# -- invoices found by typed attributes: "over 1,000 EUR, due before Friday, in the EU" ----


@workflow(
    name="send-invoice",
    version="v1",
    attributes={"customer_id": int, "region": str, "amount": Decimal, "due": datetime},
)
def send_invoice(ctx: Any) -> dict[str, Any]:
    """Send an invoice; the run list finds it by amount, due date, region or customer (the *By attribute* filter).

    Started with its attributes (``send_invoice.run(input, attributes={"customer_id": 42, "amount":
    Decimal("1250.00"), "due": due})``); the region is set once the customer's address is read.
    """
    region = ctx.step.run("read-address", lambda: ctx.input.get("region", "eu"))
    ctx.set_attribute("region", region)
    sent = ctx.step.run("send-invoice", lambda: send_email(ctx.input["email"], "invoice"))
    return {"sent": sent, "region": region}
