"""Tests of the Django admin (django_openworkflow/admin/), one module per admin module."""
