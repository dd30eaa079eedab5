from django.db import models


class SideEffect(models.Model):
    """One row per execution of a step function: lets tests count executions across processes."""

    run_id = models.UUIDField()
    step = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["run_id", "step"])]
