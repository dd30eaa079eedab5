"""The admin app, with :class:`~django_openworkflow.admin.sites.WorkflowAdminSite` as its default site.

List ``"django_openworkflow.admin_apps.WorkflowAdminConfig"`` in
``INSTALLED_APPS`` in place of ``"django.contrib.admin"``: every admin page
then shows the Inbox's counts in its navigation. A module of its own, apart
from ``apps.py`` (whose single default config Django picks for
``"django_openworkflow"``) and from the ``admin`` package (which needs the
models, not loaded yet when ``INSTALLED_APPS`` is read).
"""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class WorkflowAdminConfig(AdminConfig):
    """``django.contrib.admin`` whose default site shows the Inbox's counts (Django's ``default_site``)."""

    default_site = "django_openworkflow.admin.sites.WorkflowAdminSite"
