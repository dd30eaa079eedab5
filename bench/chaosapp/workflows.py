"""The chaos workload: five steps, a sleep, a step that fails its first attempt.

Each step execution appends a row to ``chaos_effect`` (a plain table the
chaos script creates), so duplicates of side effects can be counted.
"""

import os
import time

from django.db import connection

from django_openworkflow import RetryPolicy, workflow


def effect(run_id, step):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO chaos_effect (run_id, step, pid) VALUES (%s, %s, %s)", [str(run_id), step, os.getpid()]
        )
        cursor.execute("SELECT count(*) FROM chaos_effect WHERE run_id = %s AND step = %s", [str(run_id), step])
        count = cursor.fetchone()[0]
    time.sleep(STEP_SECONDS)  # steps take a while, so faults land in the middle of them
    return count


STEP_SECONDS = float(os.environ.get("CHAOS_STEP_MS", "100")) / 1000


@workflow(name="chaos-5", step_retry_policy=RetryPolicy(initial_interval="100ms", maximum_attempts=0))
def chaos_5(ctx):
    def flaky():
        if effect(ctx.run_id, "s3") == 1:
            raise RuntimeError("the first attempt fails on purpose")
        return 3

    total = ctx.step.run("s1", lambda: effect(ctx.run_id, "s1") and 1)
    total += ctx.step.run("s2", lambda: effect(ctx.run_id, "s2") and 2)
    ctx.step.sleep("nap", "300ms")
    total += ctx.step.run("s3", flaky)
    total += ctx.step.run("s4", lambda: effect(ctx.run_id, "s4") and 4)
    total += ctx.step.run("s5", lambda: effect(ctx.run_id, "s5") and 5)
    return total
