"""A workflows module that registers one workflow, then fails to import."""

from django_openworkflow import workflow


@workflow(name="registered-before-the-error")
def half(ctx):
    return None


raise ImportError("this module is broken on purpose")
