"""The HTTP API's tokens: only a digest is stored."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

TOKEN_START = "owf_"
"""How every API token begins, so that secret scanners and people can tell one."""
TOKEN_PREFIX_LENGTH = len(TOKEN_START) + 10
"""The token's first characters, stored in clear: shown in lists, and how a token is found."""


def token_digest(token: str) -> str:
    """What is stored of a token: its SHA-256, in hex (the secret has 256 random bits: no salt or stretching needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


class ApiTokenManager(models.Manager["ApiToken"]):
    def create_token(self, user: Any, name: str, *, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
        """A new token of ``user``: the saved row and the token itself, which is stored nowhere (show it once)."""
        row = self.model(user=user, name=name, expires_at=expires_at)
        token = row.set_new_token()
        row.save(using=self._db)
        return row, token


class ApiToken(models.Model):
    """A token that authenticates HTTP API requests as its user (``Authorization: Bearer <token>``).

    Only the token's SHA-256 is stored, and its first characters (``prefix``)
    to find it and show it. It lives in the database of the user table it
    points to, not in ``OPENWORKFLOW["DATABASE"]`` (``routers.py``).
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("user"),
        on_delete=models.CASCADE,
        related_name="workflow_api_tokens",
        help_text=_("Requests with the token act as this user, with this user's permissions."),
    )
    name = models.CharField(verbose_name=_("name"), max_length=255, help_text=_("What or who uses it, e.g. 'CI'."))
    prefix = models.CharField(verbose_name=_("prefix"), max_length=16, unique=True, editable=False)
    digest = models.CharField(verbose_name=_("SHA-256"), max_length=64, editable=False)
    created_at = models.DateTimeField(verbose_name=_("created at"), auto_now_add=True)
    last_used_at = models.DateTimeField(
        verbose_name=_("last used at"), null=True, blank=True, editable=False, help_text=_("To the minute.")
    )
    expires_at = models.DateTimeField(
        verbose_name=_("expires at"), null=True, blank=True, help_text=_("Empty: valid until revoked.")
    )
    revoked_at = models.DateTimeField(verbose_name=_("revoked at"), null=True, blank=True, editable=False)

    objects = ApiTokenManager()

    class Meta:
        db_table = "openworkflow_api_token"
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name})"

    def set_new_token(self) -> str:
        """Give the row a new token (its prefix and digest; not saved): the token, to show once."""
        token = f"{TOKEN_START}{secrets.token_hex(5)}_{secrets.token_urlsafe(32)}"
        self.prefix, self.digest = token[:TOKEN_PREFIX_LENGTH], token_digest(token)
        return token

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None
