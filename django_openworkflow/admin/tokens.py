"""The ModelAdmin for the HTTP API's tokens: create one (its token shown once), see when it was used, revoke it.

Adding a token shows it once, in a message on the next page: only its
SHA-256 is stored, so nobody can see it again; a lost token is revoked and
replaced. A superuser manages everyone's tokens; any other staff user with
the model's permissions sees and creates only their own, since a token
acts with its user's permissions.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.db.models import ForeignKey, QuerySet
from django.forms import Form
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from ..models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """The tokens, newest first; revoking is an action, and deleting works too."""

    list_display = ("token_prefix", "user", "name", "created_at", "last_used_at", "expires_at", "is_revoked")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    actions = ("revoke",)
    readonly_fields = ("token_prefix", "created_at", "last_used_at", "revoked_at")

    def get_search_fields(self, request: HttpRequest) -> tuple[str, ...]:
        return ("prefix", "name", f"user__{get_user_model().USERNAME_FIELD}")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        if obj is None:
            return ["user", "name", "expires_at"]
        return ["token_prefix", "user", "name", "created_at", "last_used_at", "expires_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        # A token's user is fixed: a token moved to another user would act with that user's permissions.
        return (*self.readonly_fields, "user") if obj is not None else ()

    def get_queryset(self, request: HttpRequest) -> QuerySet[ApiToken]:
        tokens = super().get_queryset(request).select_related("user")
        return tokens if request.user.is_superuser else tokens.filter(user_id=request.user.pk)

    def formfield_for_foreignkey(self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "user":
            users, me = get_user_model()._default_manager.all(), request.user.pk
            kwargs["queryset"] = users if request.user.is_superuser else users.filter(pk__in=[me])
            kwargs.setdefault("initial", me)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Form, change: bool) -> None:
        token = None if change else obj.set_new_token()
        super().save_model(request, obj, form, change)
        if token is not None:
            message = _(
                "The new API token {prefix} of {user}: <code>{token}</code>. Copy it now: it is not stored and "
                "cannot be shown again. Send it as the header 'Authorization: Bearer {token}'."
            )
            messages.warning(request, format_html(str(message), prefix=obj.prefix, user=obj.user, token=token))

    @admin.display(description=_("prefix"), ordering="prefix")
    def token_prefix(self, row: ApiToken) -> SafeString:
        """The token's first characters, as the token starts: data, in code type."""
        return format_html("<code>{}</code>", row.prefix)

    @admin.display(description=_("revoked"), boolean=True, ordering="revoked_at")
    def is_revoked(self, row: ApiToken) -> bool:
        return row.revoked

    @admin.action(description=_("Revoke the selected API tokens"), permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        text = ngettext("Revoked %(count)d API token.", "Revoked %(count)d API tokens.", count) % {"count": count}
        self.message_user(request, text, messages.SUCCESS)
