"""The chaos suite: kill, pause and restart things under load; prove nothing is lost.

    python bench/chaos.py [--runs 1000] [--seconds 60] [--workers 3] [--concurrency 8]
                          [--lease 2s] [--no-db-restart]

Against PostgreSQL, with real `runworkflows` subprocesses: while the runs
execute, every 1-3 s a random worker is SIGKILLed and replaced; every ~10 s
another is SIGSTOPped for longer than its lease and then resumed (a zombie
that wakes after others took over its runs); once, PostgreSQL itself is
restarted. Then the faults stop, one clean worker drains, and the script
prints one summary line and exits 1 if anything was lost, stuck, completed
twice, or written by a worker that no longer held the run.

Zombie writes are caught by triggers: every process names itself
``chaos-pid-<pid>`` to PostgreSQL, and a write to a run (or its journal) by
a worker process that neither held nor claimed it is recorded.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.chaos_settings")

TRIGGERS = """
CREATE TABLE IF NOT EXISTS chaos_effect (id bigserial PRIMARY KEY, run_id uuid NOT NULL, step text NOT NULL, pid int NOT NULL);
CREATE INDEX IF NOT EXISTS chaos_effect_run_step ON chaos_effect (run_id, step);
CREATE TABLE IF NOT EXISTS chaos_violation (id bigserial PRIMARY KEY, pid text, run_id uuid, what text, at timestamptz);

CREATE OR REPLACE FUNCTION chaos_writer_pid() RETURNS text AS $$
    SELECT CASE WHEN current_setting('application_name') LIKE 'chaos-pid-%'
                THEN ':' || substr(current_setting('application_name'), 11) || ':' END
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION chaos_check_run() RETURNS trigger AS $$
DECLARE me text := chaos_writer_pid();
BEGIN
    -- A worker may write a run it holds (fenced writes) or one it is claiming.
    IF me IS NOT NULL AND OLD.worker_id IS NOT NULL AND position(me in OLD.worker_id) = 0
       AND NOT (NEW.worker_id IS NOT NULL AND position(me in NEW.worker_id) > 0) THEN
        INSERT INTO chaos_violation (pid, run_id, what, at) VALUES (me, NEW.id, 'run ' || TG_OP, clock_timestamp());
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION chaos_check_attempt() RETURNS trigger AS $$
DECLARE me text := chaos_writer_pid(); holder text;
BEGIN
    IF me IS NOT NULL THEN
        SELECT worker_id INTO holder FROM openworkflow_run WHERE id = NEW.workflow_run_id;
        IF holder IS NOT NULL AND position(me in holder) = 0 THEN
            INSERT INTO chaos_violation (pid, run_id, what, at)
            VALUES (me, NEW.workflow_run_id, 'attempt ' || TG_OP, clock_timestamp());
        END IF;
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS chaos_check_run ON openworkflow_run;
CREATE TRIGGER chaos_check_run BEFORE UPDATE ON openworkflow_run FOR EACH ROW EXECUTE FUNCTION chaos_check_run();
DROP TRIGGER IF EXISTS chaos_check_attempt ON openworkflow_step_attempt;
CREATE TRIGGER chaos_check_attempt BEFORE INSERT OR UPDATE ON openworkflow_step_attempt
    FOR EACH ROW EXECUTE FUNCTION chaos_check_attempt();
"""


TRUNCATE = (
    "TRUNCATE openworkflow_signal, openworkflow_step_attempt, openworkflow_run, chaos_effect, chaos_violation CASCADE"
)


def self_check(cursor: object) -> bool:
    """Prove the detector: a write to a run held by another worker process must be recorded."""
    cursor.execute(  # type: ignore[attr-defined]
        "INSERT INTO openworkflow_run (id, workflow_name, status, attempts, available_at, worker_id, created_at, updated_at) "
        "VALUES (gen_random_uuid(), 'self-check', 'running', 0, now(), 'host:1:abc', now(), now())"
    )
    cursor.execute("SET application_name = 'chaos-pid-2'")  # type: ignore[attr-defined]
    cursor.execute("UPDATE openworkflow_run SET output = '1' WHERE workflow_name = 'self-check'")  # type: ignore[attr-defined]
    cursor.execute("SET application_name = 'chaos-orchestrator'")  # type: ignore[attr-defined]
    cursor.execute("SELECT count(*) FROM chaos_violation")  # type: ignore[attr-defined]
    return bool(cursor.fetchone()[0] == 1)  # type: ignore[attr-defined]


def ensure_database() -> None:
    import psycopg
    from django.conf import settings

    name = settings.DATABASES["default"]["NAME"]
    params = {k: v for k, v in {
        "host": settings.DATABASES["default"].get("HOST") or "127.0.0.1",
        "port": settings.DATABASES["default"].get("PORT") or 5432,
        "user": settings.DATABASES["default"].get("USER") or "postgres",
    }.items() if v}  # fmt: skip
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def restart_postgres() -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True)


class Fleet:
    """The worker subprocesses, replaced as they are killed."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log = open(Path("/tmp") / f"owf-chaos-{os.getpid()}.log", "ab")  # noqa: SIM115

    def start(self) -> subprocess.Popen[bytes]:
        command = [
            sys.executable, "-m", "django", "runworkflows", "--settings=bench.chaos_settings",
            "--concurrency", str(self.args.concurrency), "--lease", self.args.lease, "--poll", "50ms",
        ]  # fmt: skip
        proc = subprocess.Popen(command, cwd=ROOT, stdout=self.log, stderr=self.log)
        self.procs.append(proc)
        return proc

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def stop_all(self) -> None:
        for proc in self.live():
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", default="2s")
    parser.add_argument("--no-db-restart", action="store_true")
    parser.add_argument("--step-ms", type=int, default=100, help="how long each step's function takes")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    os.environ["CHAOS_STEP_MS"] = str(args.step_ms)  # read by the workers' workflow module

    import django

    django.setup()
    ensure_database()
    from django.core.management import call_command
    from django.db import connection

    from bench.chaosapp.workflows import chaos_5
    from django_openworkflow.durations import parse_duration

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute(TRIGGERS)
        cursor.execute(TRUNCATE)
        detector_works = self_check(cursor)
        cursor.execute(TRUNCATE)
    if not detector_works:
        print("CHAOS self-check failed: the zombie-write triggers did not fire", file=sys.stderr)
        return 2
    for i in range(args.runs):
        chaos_5.run({"i": i})
    connection.close()

    lease = parse_duration(args.lease).total_seconds()
    fleet = Fleet(args)
    for _ in range(args.workers):
        fleet.start()
    kills = stops = db_restarts = 0
    stopped: set[int] = set()

    def zombie(proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGSTOP)
        time.sleep(lease * 2.5)
        proc.send_signal(signal.SIGCONT)
        stopped.discard(proc.pid)

    started = time.monotonic()
    next_stop = started + 5
    restart_at = None if args.no_db_restart else started + args.seconds / 2
    threads = []
    while time.monotonic() - started < args.seconds:
        time.sleep(rng.uniform(1, 3))
        candidates = [p for p in fleet.live() if p.pid not in stopped]
        if time.monotonic() >= next_stop and len(candidates) > 1:
            victim = rng.choice(candidates)
            stopped.add(victim.pid)
            thread = threading.Thread(target=zombie, args=(victim,))
            thread.start()
            threads.append(thread)
            stops += 1
            next_stop = time.monotonic() + 10
            candidates.remove(victim)
        if candidates:
            victim = rng.choice(candidates)
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            kills += 1
            fleet.start()
        if restart_at is not None and time.monotonic() >= restart_at:
            restart_postgres()
            db_restarts += 1
            restart_at = None
    for thread in threads:
        thread.join()
    faults_s = time.monotonic() - started

    # Faults over: one clean worker drains (the survivors are stopped gracefully).
    survivors = fleet.live()
    fleet.start()
    for proc in survivors:
        proc.send_signal(signal.SIGTERM)
    drain_started = time.monotonic()
    from django_openworkflow.models import RunStatus, WorkflowRun

    while time.monotonic() - drain_started < 180:
        if WorkflowRun.objects.exclude(status=RunStatus.COMPLETED).count() == 0:
            break
        time.sleep(0.5)
    drain_s = time.monotonic() - drain_started
    fleet.stop_all()

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM openworkflow_run")
        present = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM openworkflow_run WHERE status <> 'completed'")
        stuck = cursor.fetchone()[0]
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM openworkflow_step_attempt WHERE status = 'completed' "
            "GROUP BY workflow_run_id, step_name HAVING count(*) > 1) d"
        )
        duplicate_completions = cursor.fetchone()[0]
        # s3 fails its first attempt on purpose: two executions are expected there.
        cursor.execute(
            "SELECT coalesce(sum(n - CASE WHEN step = 's3' THEN 2 ELSE 1 END), 0) "
            "FROM (SELECT step, count(*) n FROM chaos_effect GROUP BY run_id, step) e"
        )
        duplicate_effects = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM (SELECT DISTINCT run_id, step FROM chaos_effect) e")
        effect_pairs = cursor.fetchone()[0]
        cursor.execute("SELECT count(*) FROM chaos_violation")
        zombie_writes = cursor.fetchone()[0]
    lost = args.runs - present
    missing_effects = args.runs * 5 - effect_pairs
    print(
        f"CHAOS runs={args.runs} workers={args.workers}x{args.concurrency} lease={args.lease} faults_s={faults_s:.0f} "
        f"kills={kills} stops={stops} db_restarts={db_restarts} lost={lost} stuck={stuck} "
        f"duplicate_completions={duplicate_completions} zombie_writes={zombie_writes} "
        f"duplicate_side_effects={duplicate_effects} missing_side_effects={missing_effects} drain_s={drain_s:.1f}"
    )
    bad = lost or stuck or duplicate_completions or zombie_writes or missing_effects
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
