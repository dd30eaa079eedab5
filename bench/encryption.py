"""Payload encryption's figures: what a payload costs to save and load, off and on, and a rotate-keys pass.

Figures, not a test. Run from the repository's root:

    BENCH_DB=sqlite .venv/bin/python -m bench.encryption [--runs 10000] [--batch-size 500]
    BENCH_DB=postgres .venv/bin/python -m bench.encryption      # BENCH_DATABASE_URL (bench/settings.py)
    BENCH_DB=mariadb .venv/bin/python -m bench.encryption       # BENCH_MARIADB_URL

Prints ``encryption.<figure> <value> <unit>`` lines:

- ``save_stock`` / ``save_off`` / ``save_on``, ``load_*``: one payload (a small dict) through
  Django's own JSONField and through the payload field with encryption off and on, in ns
  (the field's prep and converter only: no query). ``off`` is the hot path of every project
  that does not set PAYLOAD_ENCRYPTION.
- ``rotate_values_per_s``: ``workflows rotate-keys`` over ``--runs`` runs (input, output,
  error each), from one key to another, in values re-encrypted per second; ``check_s``, the
  ``--check`` that follows.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import timeit

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")


def field_costs() -> None:
    from cryptography.fernet import Fernet
    from django.conf import settings
    from django.core.serializers.json import DjangoJSONEncoder
    from django.db import connection, models
    from django.test.utils import override_settings

    from django_openworkflow.encryption import keyring, seal
    from django_openworkflow.models import WorkflowRun

    ours = WorkflowRun._meta.get_field("input")
    stock = models.JSONField(encoder=DjangoJSONEncoder, null=True)
    stock.set_attributes_from_name("stock")
    value = {"user": 42, "email": "someone@example.com", "items": list(range(20))}
    text = json.dumps(value, cls=DjangoJSONEncoder)  # what a read hands the field

    def ns(statement: str, number: int, **names: object) -> float:
        scope = {"connection": connection, "value": value, "text": text, **names}
        # CPU time, not wall time: steadier on a busy machine.
        runs = timeit.repeat(statement, number=number, repeat=7, globals=scope, timer=time.process_time)
        return min(runs) / number * 1e9

    report("save_stock", ns("field.get_db_prep_save(value, connection)", 50_000, field=stock), "ns")
    report("save_off", ns("field.get_db_prep_save(value, connection)", 50_000, field=ours), "ns")
    report("load_stock", ns("field.from_db_value(text, None, connection)", 50_000, field=stock), "ns")
    report("load_off", ns("field.from_db_value(text, None, connection)", 50_000, field=ours), "ns")
    keys = {**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": [Fernet.generate_key().decode()]}
    with override_settings(OPENWORKFLOW=keys):
        ring = keyring()
        assert ring is not None
        sealed_text = json.dumps(seal(value, ring))
        report("save_on", ns("field.get_db_prep_save(value, connection)", 5_000, field=ours), "ns")
        report("load_on", ns("field.from_db_value(text, None, connection)", 5_000, field=ours, text=sealed_text), "ns")


def rotation(runs: int, batch_size: int) -> None:
    from cryptography.fernet import Fernet
    from django.conf import settings
    from django.core.management import call_command
    from django.test.utils import override_settings
    from django.utils import timezone

    from django_openworkflow.models import WorkflowRun
    from django_openworkflow.store.rotation import pending_counts, rotate_column

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    call_command("migrate", verbosity=0)
    WorkflowRun.objects.filter(workflow_name="bench-encryption").delete()
    error = {"type": "ValueError", "message": "boom", "traceback": "Traceback ...\nValueError: boom\n"}
    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": [old]}):
        now = timezone.now()
        rows = [
            WorkflowRun(workflow_name="bench-encryption", status="failed", input={"i": i, "email": f"u{i}@example.com"},
                        output=[i], error=error, available_at=now)
            for i in range(runs)
        ]  # fmt: skip
        WorkflowRun.objects.bulk_create(rows, batch_size=1000)
    with override_settings(OPENWORKFLOW={**settings.OPENWORKFLOW, "PAYLOAD_ENCRYPTION": [new, old]}):
        started = time.perf_counter()
        rewritten = sum(
            rotate_column(WorkflowRun, name, batch_size=batch_size, on_batch=None).rewritten
            for name in ("input", "output", "error")
        )
        seconds = time.perf_counter() - started
        report("rotate_values", rewritten, "values")
        report("rotate_values_per_s", rewritten / seconds, "values/s")
        started = time.perf_counter()
        pending_counts()
        report("check_s", time.perf_counter() - started, "s")
    WorkflowRun.objects.filter(workflow_name="bench-encryption").delete()


def report(name: str, value: float, unit: str) -> None:
    db = os.environ.get("BENCH_DB", "postgres")
    print(f"{db}.encryption.{name} {value:.1f} {unit}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="runs the rotation pass rewrites (default 10000)")
    parser.add_argument("--batch-size", type=int, default=500)
    options = parser.parse_args()
    import django

    django.setup()
    field_costs()
    rotation(options.runs, options.batch_size)


if __name__ == "__main__":
    main()
