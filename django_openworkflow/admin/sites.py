"""The admin site with the Inbox's counts in its navigation: how many tasks wait for you, how many are overdue.

Django's admin lists a model by its plural name only, the same for every
user. :class:`WorkflowAdminSite` (Django's own ``AdminSite`` with
:class:`InboxCounts` mixed in) shows, on every admin page's navigation and
index, "Inbox (3, 1 overdue)": the tasks the user may act on, as the Inbox's
"All I may see" view counts them. Make it the default site the way Django
documents (``AdminConfig.default_site``)::

    INSTALLED_APPS = [
        "django_openworkflow.admin_apps.WorkflowAdminConfig",  # in place of "django.contrib.admin"
        ...
    ]

or mix :class:`InboxCounts` into your own ``AdminSite`` subclass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext

from ..client.approvals import inbox_counts
from ..models import Approval

if TYPE_CHECKING:
    _Base = admin.AdminSite
else:
    _Base = object


def inbox_label(name: str, counts: dict[str, int]) -> str:
    """The Inbox's entry in the navigation: its name, the tasks the user may act on, and the overdue among them."""
    if not counts["all"]:
        return name
    if counts["overdue"]:
        return gettext("%(name)s (%(count)d, %(overdue)d overdue)") % {
            "name": name,
            "count": counts["all"],
            "overdue": counts["overdue"],
        }
    return f"{name} ({counts['all']})"


class InboxCounts(_Base):
    """An ``AdminSite`` mixin: the Inbox's entry in the app list says how many tasks wait for the user."""

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[Any]:
        app_list = super().get_app_list(request, app_label)
        for app in app_list:
            for model in app["models"]:
                if model["model"] is Approval and request.user.is_active:
                    model["name"] = inbox_label(model["name"], inbox_counts(request.user))
        return app_list


class WorkflowAdminSite(InboxCounts, admin.AdminSite):
    """Django's admin site, with the Inbox's counts in its navigation."""
