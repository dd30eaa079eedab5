"""``Authorization: Bearer <token>``: the API's tokens (``ApiToken``), checked before the session.

A request that carries a Bearer token is authenticated by it alone: a
token that is malformed, unknown, revoked or expired, or whose user is
inactive, is a 401 that says which, never a fall-back to the session
cookie the same request may carry. Other schemes (``Basic``, from a proxy
in front of the site) are not the API's: the session decides as before.

The token is found by its first characters (stored in clear, unique) and
checked by comparing SHA-256 digests in constant time. A token request
needs no CSRF token: no browser sends an ``Authorization`` header by
itself, so no other site can make one carry the credential.
"""

from __future__ import annotations

import hmac
import re
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpRequest
from django.utils import timezone

from ..models import TOKEN_PREFIX_LENGTH, TOKEN_START, ApiToken, token_digest
from .fields import ApiError

TOKEN_SHAPE = re.compile(rf"{TOKEN_START}[0-9a-f]{{{TOKEN_PREFIX_LENGTH - len(TOKEN_START)}}}_[A-Za-z0-9_-]{{43}}")
"""What ``ApiToken.objects.create_token`` gives out: ``owf_``, 10 hex digits, ``_``, 43 characters of base64url."""
LAST_USED_EVERY = timedelta(minutes=1)
"""How stale ``last_used_at`` may get before a request writes it again: one write a minute per busy token."""


def bearer_token(request: HttpRequest) -> str | None:
    """The Bearer token the request carries (``""`` for an empty one), or None when it carries none."""
    scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip()


def _refuse(code: str, message: str) -> ApiError:
    return ApiError(401, code, message)


def authenticate(token: str) -> Any:
    """The user ``token`` authenticates, or an ApiError (401) saying what is wrong with it."""
    if not TOKEN_SHAPE.fullmatch(token):
        raise _refuse(
            "malformed_token",
            f"the Bearer token is not an API token: one starts with {TOKEN_START!r} and has "
            f"{TOKEN_PREFIX_LENGTH + 44} characters (create one in the admin or with "
            "`manage.py workflows token create`)",
        )
    prefix = token[:TOKEN_PREFIX_LENGTH]
    row = ApiToken.objects.filter(prefix=prefix).first()
    # Compared in constant time, and compared even when no row has the prefix, so that timing tells nothing.
    stored = row.digest if row is not None else "0" * 64
    if not hmac.compare_digest(stored, token_digest(token)) or row is None:
        raise _refuse("unknown_token", f"no API token {prefix} matches: it was deleted, or mistyped")
    now = timezone.now()
    if row.revoked_at is not None:
        raise _refuse("revoked_token", f"the API token {prefix} was revoked at {row.revoked_at.isoformat()}")
    if row.expires_at is not None and row.expires_at <= now:
        raise _refuse("expired_token", f"the API token {prefix} expired at {row.expires_at.isoformat()}")
    user = get_user_model()._default_manager.filter(pk=row.user_id).first()
    if user is None or not getattr(user, "is_active", True):  # as Django's ModelBackend reads it
        raise _refuse("inactive_user", f"the API token {prefix} belongs to a user who is inactive")
    if row.last_used_at is None or row.last_used_at <= now - LAST_USED_EVERY:
        # Only when stale, and only if no other request wrote it meanwhile: a busy token costs a write a minute.
        ApiToken.objects.filter(pk=row.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=now - LAST_USED_EVERY)
        ).update(last_used_at=now)
    return user


def challenge(error: ApiError) -> str:
    """The ``WWW-Authenticate`` header of a 401 (RFC 6750): what the API takes, and what was wrong."""
    if error.code == "not_authenticated":
        return 'Bearer realm="workflows"'
    description = error.message.replace("\\", "\\\\").replace('"', '\\"')
    return f'Bearer realm="workflows", error="invalid_token", error_description="{description}"'
