"""PostgreSQL triggers that NOTIFY workers and waiters; a no-op on other databases.

``openworkflow_due``: a run became claimable (inserted, woken, retried), so
idle workers wake at once instead of at their next poll. Sent at commit, so
a run started inside ``transaction.atomic()`` wakes workers only if it
commits. ``openworkflow_done``: a run finished; the payload is its id, for
``handle.result()``. Polling stays as the safety net: a lost notification
delays work, never loses it.
"""

from django.db import migrations

FORWARD = """
CREATE OR REPLACE FUNCTION openworkflow_notify() RETURNS trigger AS $$
BEGIN
    IF NEW.status IN ('completed', 'failed', 'canceled') THEN
        IF TG_OP = 'UPDATE' AND OLD.status IS DISTINCT FROM NEW.status THEN
            PERFORM pg_notify('openworkflow_done', NEW.id::text);
        END IF;
    ELSIF NEW.worker_id IS NULL AND NEW.available_at <= clock_timestamp() + interval '1 second' THEN
        PERFORM pg_notify('openworkflow_due', '');
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER openworkflow_run_notify
AFTER INSERT OR UPDATE OF status, available_at, worker_id ON openworkflow_run
FOR EACH ROW EXECUTE FUNCTION openworkflow_notify();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS openworkflow_run_notify ON openworkflow_run;
DROP FUNCTION IF EXISTS openworkflow_notify();
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(FORWARD)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [("django_openworkflow", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
