from django.db import models


class Ledger(models.Model):
    """One row when a step execution begins its work and one when it ends, from any process.

    The auto-increment id orders the events of every process without a
    clock: a row's id is taken when it is inserted, and each row is
    committed before the work that follows it. ``token`` pairs a start with
    its end (one per execution of the step); a start without an end is an
    execution whose process died.
    """

    run_id = models.UUIDField()
    key = models.CharField(max_length=100)
    event = models.CharField(max_length=5)  # "start" or "end"
    token = models.CharField(max_length=32)
    pid = models.IntegerField()
    at = models.DateTimeField(auto_now_add=True)  # for reading a failure only; the checks use the id order

    class Meta:
        indexes = [models.Index(fields=["run_id", "event"])]
