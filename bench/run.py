#!/usr/bin/env python
"""django-openworkflow benchmark suite: figures, not tests (see bench/README.md).

    python bench/run.py [--db postgres|sqlite|mariadb|all] [--quick] [--only throughput,latency,...]
    python bench/run.py --peer-protocol --only throughput,latency     (what bench/compare.sh runs)

Prints one ``<db>.<figure> <value> <unit>`` line per figure as it is measured,
then ``RESULT peer=ours ...`` lines with the same key=value fields as the peers'
result lines in ../shared/bench-peers (one per configuration; written by
bench/report.py), so the peers' ``summarize.py`` and ``bench/compare.py`` can
put them side by side.

Phases (each starts from empty tables; one module each in bench/phases/):
  throughput  ONE `runworkflows` subprocess (idle first) + a producer subprocess starting N
              runs one `spec.run()` at a time; wall = first start -> max(finished_at).
              Also a prefill variant (runs inserted before the worker starts).
              Commits per step/workflow are measured over the same window.
  latency     idle worker, sequential 1-step runs after a random idle gap:
              start -> finished_at (server) and start -> handle.result() returned.
  replay      in-process: per-step cost of a 1,000-step run vs a 10-step one.
  claims      claim latency with 1M finished + 10k parked runs vs an empty table.
  attributes  the claim and the run list with and without typed attribute rows; filtered first pages.
  fairness    10,000 runs of one key + 10 of each of 100 others, drained by claims of 10 with the
              queue not fair, then fair: claim cost, and the runs claimed before a small key's last.
  aging       5 priority-0 runs behind a flood of priority-5 ones that never drains, claimed one at a time,
              aging off then on: the longest wait of a low run, and one aging sweep's cost.
  memory      worker RSS after 1k and after 50k completed runs (--quick: 500 and 2k).
  starts      run() one at a time from one thread, and run_many() in bulk (with and without keys)
  fanout      one parent starts N children at once (start_workflow + wait_all; N = 300,
              --quick 50): wall = parent started -> handle.result() returned.
  prune       100,000 expired finished runs (--quick 5,000) pruned while a thread keeps claiming:
              prune rate, and claim latency (median, p99, worst) before vs during the prune.
  scaleout    4,000 prefilled runs (--quick 600) drained by one worker process, then by two:
              the ratio, and CPU per workflow in the workers vs in the database server.
  rotation    (only with --only rotation) 100,000 payloads (--quick 10,000) under an old key re-encrypted by
              rotate-keys while a worker runs, interrupted halfway through the first column and resumed;
              FAILS on anything lost (see bench/phases/rotation.py).
  payloads    (only with --only payloads) 500 runs (--quick 100) of 8 KB payloads with encryption,
              compression and offloading off and on: start latency, throughput, tables' and files' size.
  soak        (only with --only soak) 30 minutes (--quick 2) of one-step runs offered at a fixed
              rate to 2 workers with a 3 s lease, 2 % of the steps longer than the lease, 10 % of
              the runs under Concurrency(2), optionally a worker SIGKILLed every --kill-every s;
              a row per minute, and FAILS on a step executed twice, a limit exceeded, a run
              unfinished or a heartbeat thread dead (see bench/phases/soak.py).

Exit status: 0 when every phase ran and every run completed (and the soak found nothing); 1 otherwise.
Timing targets are never asserted here.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.context import Bench  # noqa: E402
from bench.databases import BENCH_DBS  # noqa: E402
from bench.phases import (  # noqa: E402
    aging,
    attributes,
    claims,
    fairness,
    fanout,
    latency,
    memory,
    payloads,
    prune,
    replay,
    rotation,
    scaleout,
    soak,
    starts,
    throughput,
)
from bench.processes import produce  # noqa: E402

# name -> run(bench), in the order they run
PHASES = {
    "throughput": throughput.run,
    "latency": latency.run,
    "replay": replay.run,
    "claims": claims.run,
    "attributes": attributes.run,
    "fairness": fairness.run,
    "aging": aging.run,
    "memory": memory.run,
    "fanout": fanout.run,
    "starts": starts.run,
    "prune": prune.run,
    "rotation": rotation.run,
    "payloads": payloads.run,
    "scaleout": scaleout.run,
    "soak": soak.run,
}
DEFAULT_PHASES = [name for name in PHASES if name not in ("soak", "rotation", "payloads")]
"""Without --only: every phase but the soak, which takes 30 minutes (2 with --quick) and is run on its own, and
the rotation and the payloads' stored form, which need the encryption extra and price opt-in settings."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "role", nargs="?", default="main", choices=["main", "_produce", "_soak_start"], help=argparse.SUPPRESS
    )
    p.add_argument("--db", default=os.environ.get("BENCH_DB", "postgres"), choices=[*BENCH_DBS, "all"])
    p.add_argument("--quick", action="store_true", help="small sizes (a first look, < ~3 min per database)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="CI's: --quick with the smallest sizes that still take every phase's path (about 1 min per "
        "database); its figures say nothing, but every run must complete",
    )
    p.add_argument(
        "--only",
        default=",".join(DEFAULT_PHASES),
        help=f"comma-separated phases: {','.join(PHASES)} (default: all but soak)",
    )
    p.add_argument(
        "--peer-protocol",
        action="store_true",
        help="throughput/latency in the exact shapes of ../shared/bench-peers (2,000 x 3 steps at "
        "concurrency 20 and 100, prefill at 20; 50 latency samples with a 0-1 s gap)",
    )
    p.add_argument("--n", type=int, default=None, help="override the number of runs of every throughput config")
    p.add_argument("--lat-n", type=int, default=None, help="override the number of latency samples")
    p.add_argument("--gap-ms", type=int, default=None, help="override the max random idle gap before a latency sample")
    p.add_argument("--fanout-n", type=int, default=None, help="override the number of children of the fan-out")
    p.add_argument("--poll", default="100ms", help="worker --poll (default 100ms)")
    p.add_argument("--no-cap", action="store_true", help="do not lower concurrency to fit the server's max_connections")
    p.add_argument("--timeout", type=float, default=None, help="per-phase timeout in seconds")
    p.add_argument("--keep-db", action="store_true", help="SQLite: keep bench/bench.sqlite3 after the run")
    p.add_argument("--tag", default="", help="extra key=value fields appended to RESULT lines")
    p.add_argument("--profile", default=None, help="py-spy record the worker of each throughput config into this dir")
    soak = p.add_argument_group("soak (--only soak)")
    soak.add_argument("--soak-minutes", type=float, default=None, help="offered load for this long (30; --quick 2)")
    soak.add_argument("--soak-rate", type=float, default=None, help="runs started per second (default per database)")
    soak.add_argument("--soak-workers", type=int, default=2, help="runworkflows processes (2)")
    soak.add_argument("--soak-slots", type=int, default=16, help="slots of each worker (16)")
    soak.add_argument("--soak-lease", type=float, default=3.0, help="the workers' --lease, seconds (3)")
    soak.add_argument("--soak-long-share", type=float, default=0.02, help="share of steps that sleep 1.5 leases")
    soak.add_argument("--soak-limited-share", type=float, default=0.1, help="share of runs under Concurrency(2)")
    soak.add_argument("--soak-interval", type=float, default=None, help="seconds per report row (60; --quick 15)")
    soak.add_argument("--soak-seed", type=int, default=26, help="seed of the starter's choices")
    soak.add_argument("--kill-every", type=float, default=0, help="SIGKILL a worker every N seconds and start another")
    soak.add_argument(
        "--soak-vacuum-every",
        type=float,
        default=60.0,
        help="where the server runs without autovacuum (PostgreSQL autovacuum = off): VACUUM the workflow tables "
        "every N seconds, as autovacuum would (0: never)",
    )
    soak.add_argument(
        "--soak-break-heartbeat",
        type=float,
        default=None,
        help="test the soak itself: the first worker's heartbeat thread dies after N seconds (the phase must fail)",
    )
    p.add_argument("--soak-seconds", type=float, default=0, help=argparse.SUPPRESS)
    p.add_argument("--soak-dir", default="", help=argparse.SUPPRESS)
    # producer-only options
    p.add_argument("--workflow", default="bench-3", help=argparse.SUPPRESS)
    p.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def run_phases(bench: Bench) -> list[str]:
    """The chosen phases in order, each timed; a failing phase is noted, the others still run.

    Returns the RESULT lines (printed by :func:`main` after ``total_s``).
    """
    only = [p.strip() for p in bench.args.only.split(",") if p.strip()]
    for p in only:
        if p not in PHASES:
            raise SystemExit(f"unknown phase {p!r}; choose from {', '.join(PHASES)}")
    bench.setup()
    outputs: dict = {}
    for name, run in PHASES.items():
        if name not in only:
            continue
        t0 = time.monotonic()
        try:
            outputs[name] = run(bench)
        except Exception as exc:
            bench.ok = False
            bench.note(f"phase {name} FAILED: {exc!r}")
            traceback.print_exc()
            bench.procs.kill_children()
        bench.emit(f"phase.{name}_s", time.monotonic() - t0, "s (time this phase took)", 1)
    return report.result_lines(
        bench.db,
        bench.dbh.cfg_prefix,
        outputs.get("throughput", []),
        outputs.get("latency"),
        bench.args.tag,
        outputs.get("fanout"),
    )


def run_each_database() -> int:
    """``--db all``: Django settings are per process, so each database runs in its own process."""
    rest, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--db":
            skip = True
        elif not a.startswith("--db="):
            rest.append(a)
    rc = 0
    for db in BENCH_DBS:
        rc |= subprocess.call([sys.executable, str(Path(__file__).resolve()), *rest, "--db", db])
    return rc


def main() -> int:
    args = parse_args()
    if args.role in ("_produce", "_soak_start"):
        os.environ["BENCH_DB"] = args.db
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        produce(args) if args.role == "_produce" else soak.start_runs(args)
        return 0
    if args.db == "all":
        return run_each_database()
    os.environ["BENCH_DB"] = args.db
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    os.environ.setdefault("BENCH_APP_NAME", "owf-bench")
    bench = Bench(args, args.db)
    t0 = time.monotonic()
    print(
        f"# django-openworkflow bench: db={args.db} quick={args.quick} smoke={args.smoke} host={os.uname().nodename} "
        f"nproc={os.cpu_count()} python={sys.version.split()[0]} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}",
        flush=True,
    )
    old = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        lines = run_phases(bench)
    except KeyboardInterrupt:
        bench.note("interrupted")
        return 130
    finally:
        bench.close()
        signal.signal(signal.SIGTERM, old)
    bench.emit("total_s", time.monotonic() - t0, "s", 1)
    for line in lines:
        print(line, flush=True)
    if not bench.ok:
        bench.note("some phase failed or some runs did not complete (see above)")
    return 0 if bench.ok else 1


if __name__ == "__main__":
    sys.exit(main())
