"""The demo's admin: a user's page lists the workflow runs started for that user (``subject=user``)."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from django_openworkflow.admin.subjects import WorkflowRunsMixin

User = get_user_model()

admin.site.unregister(User)


@admin.register(User)
class UserWithRunsAdmin(WorkflowRunsMixin, UserAdmin):
    """Django's user admin, with the user's onboarding runs below the form."""
