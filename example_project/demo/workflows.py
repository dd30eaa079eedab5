"""Demo workflows, autodiscovered by django_openworkflow at startup (like admin.py).

The steps only pretend to talk to the outside world; in a real project they
would create rows, call an e-mail API, and so on. Each step's return value is
stored in the journal, so after a crash or a restart the workflow replays
from the top and completed steps return their stored result instead of
running again.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.utils import timezone

from django_openworkflow import workflow


def create_account(user_id: int, email: str) -> dict[str, Any]:
    return {"user_id": user_id, "email": email, "created_at": timezone.now().isoformat()}


def send_email(to: str, template: str) -> str:
    # Pretend to hand the message to a mail provider; return its message id.
    return f"<{template}.{uuid.uuid4().hex[:12]}@mail.example.com>"


@workflow(name="onboard-user", version="v1")
def onboard_user(ctx: Any) -> dict[str, Any]:
    user_id = ctx.input["user_id"]
    email = ctx.input["email"]

    account = ctx.step.run("create-account", lambda: create_account(user_id, email))
    welcome_id = ctx.step.run("send-welcome-email", lambda: send_email(account["email"], "welcome"))

    # Durable: the worker slot is freed while the run waits, and a restart does not reset the timer.
    ctx.step.sleep("welcome-delay", ctx.input.get("delay", "2s"))

    tips_id = ctx.step.run("send-tips-email", lambda: send_email(account["email"], "tips"))
    return {"user_id": account["user_id"], "emails_sent": [welcome_id, tips_id]}
