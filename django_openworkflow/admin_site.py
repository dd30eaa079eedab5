"""The admin site with the Inbox's counts in its navigation: how many tasks wait for you, how many are overdue.

Django's admin lists a model by its plural name only, the same for every
user. :class:`WorkflowAdminSite` (Django's ``AdminSite`` with
:class:`InboxCounts` mixed in) shows, in every admin page's navigation and
on the index, "Inbox (3, 1 overdue)": the tasks the user may act on, as
the Inbox's "All I may see" view counts them. Make it the default site the
way Django documents, with :class:`WorkflowAdminConfig` (its
``default_site``)::

    INSTALLED_APPS = [
        "django_openworkflow.admin_site.WorkflowAdminConfig",  # in place of "django.contrib.admin"
        ...
    ]

or mix :class:`InboxCounts` into your own ``AdminSite`` subclass.

A module of its own, outside the ``admin`` package: Django imports the
default site while the admin autodiscovers, and a site that lived in the
package whose import registers the ModelAdmins would be made twice (the
registrations going to the first). It is imported when ``INSTALLED_APPS``
is read, so the models are imported only when a page is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib.admin import AdminSite
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest
from django.utils.translation import gettext

if TYPE_CHECKING:
    _Base = AdminSite
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
        from .client.approvals import inbox_counts
        from .models import Approval

        app_list = super().get_app_list(request, app_label)
        for app in app_list:
            for model in app["models"]:
                if model["model"] is Approval and request.user.is_active:
                    model["name"] = inbox_label(model["name"], inbox_counts(request.user))
        return app_list


class WorkflowAdminSite(InboxCounts, AdminSite):
    """Django's admin site, with the Inbox's counts in its navigation."""


class WorkflowAdminConfig(AdminConfig):
    """``django.contrib.admin`` whose default site shows the Inbox's counts (Django's ``default_site``)."""

    default_site = "django_openworkflow.admin_site.WorkflowAdminSite"
