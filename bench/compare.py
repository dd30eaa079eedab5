#!/usr/bin/env python3
"""Side-by-side summary of bench/compare.sh results: median ratio per figure, ours / peer.

    python3 bench/compare.py RESULTS_FILE [--run-prefix RUN_ID]

Reads ``RESULT ...`` lines (ours from ``bench/run.py --peer-protocol``, the peers'
from ../shared/bench-peers/run_all.sh), each tagged ``run=<RUN_ID>_r<k>``. For
every figure and peer it pairs round k of ours with round k of the peer, takes
the ratio ours/peer, and prints the median over rounds (with min..max), next to
the median raw values (``--per-round``: and each round's values). Throughput and
children per second: higher ratio is better for us. Latency, fan-out wall time,
write transactions and CPU per workflow: lower ratio is better for us.
Standard library only (runs with any python3).
"""

from __future__ import annotations

import argparse
import re
import statistics
from collections import defaultdict

# (section, figure key, our cfg, [(peer label, peer cfg)], better, target ratio or None)
THR = "wf_per_s"
COMPARISONS = [
    (
        "throughput, live, 2000 x 3 steps, concurrency 20",
        THR,
        "ours_c20",
        [
            ("OpenWorkflow", "ow_c20"),
            ("DBOS (poll 10 ms)", "dbos_c20_poll0.01"),
            ("DBOS (poll 1 s)", "dbos_c20_poll1"),
            ("Celery (prefork 2)", "celery_prefork2"),
            ("Celery (threads 20)", "celery_threads20"),
            ("procrastinate", "proc_c20"),
        ],
        "higher",
    ),
    (
        "throughput, live, 2000 x 3 steps, concurrency 100",
        THR,
        "ours_c100",
        [
            ("OpenWorkflow", "ow_c100"),
            ("OpenWorkflow (pool 100)", "ow_c100_pool100"),
            ("DBOS (poll 10 ms)", "dbos_c100_poll0.01"),
            ("DBOS (poll 1 s)", "dbos_c100_poll1"),
            ("Celery (prefork 2)", "celery_prefork2"),
            ("procrastinate", "proc_c100"),
        ],
        "higher",
    ),
    (
        "throughput, prefill, 2000 x 3 steps, concurrency 20",
        THR,
        "ours_c20_prefill",
        [
            ("OpenWorkflow", "ow_c20_prefill"),
            ("DBOS (poll 10 ms)", "dbos_c20_poll0.01_prefill"),
            ("Celery (prefork 2)", "celery_prefork2_prefill"),
            ("procrastinate", "proc_c20_prefill"),
        ],
        "higher",
    ),
    (
        "write transactions per workflow (live, c20; cluster-wide xid delta)",
        "write_txn_per_wf",
        "ours_c20",
        [("OpenWorkflow", "ow_c20"), ("DBOS (poll 10 ms)", "dbos_c20_poll0.01"), ("procrastinate", "proc_c20")],
        "lower",
    ),
    (
        "machine CPU ms per workflow (live, c20)",
        "cpu_ms_per_wf",
        "ours_c20",
        [
            ("OpenWorkflow", "ow_c20"),
            ("DBOS (poll 10 ms)", "dbos_c20_poll0.01"),
            ("Celery (prefork 2)", "celery_prefork2"),
            ("procrastinate", "proc_c20"),
        ],
        "lower",
    ),
    (
        "latency p50, start -> completion persisted (idle, 1 step)",
        "lat_p50_ms",
        "ours_lat",
        [
            ("OpenWorkflow", "ow_lat"),
            ("DBOS (poll 10 ms)", "dbos_lat_poll0.01"),
            ("DBOS (poll 1 s)", "dbos_lat_poll1"),
            ("Celery (prefork 2)", "celery_lat"),
            ("procrastinate", "proc_lat"),
        ],
        "lower",
    ),
    (
        "latency p90, start -> completion persisted",
        "lat_p90_ms",
        "ours_lat",
        [
            ("OpenWorkflow", "ow_lat"),
            ("DBOS (poll 10 ms)", "dbos_lat_poll0.01"),
            ("Celery (prefork 2)", "celery_lat"),
            ("procrastinate", "proc_lat"),
        ],
        "lower",
    ),
    (
        "fan-out: a parent starts N children at once and collects their results (wall, start -> result() returned)",
        "wall_s",
        "ours_fanout",
        [("OpenWorkflow", "ow_fanout")],
        "lower",
    ),
    (
        "fan-out: start -> the parent's finished_at (without the caller's result() polling)",
        "server_wall_s",
        "ours_fanout",
        [("OpenWorkflow", "ow_fanout")],
        "lower",
    ),
    (
        "fan-out: children per second (N / wall)",
        "children_per_s",
        "ours_fanout",
        [("OpenWorkflow", "ow_fanout")],
        "higher",
    ),
    (
        "fan-out: machine CPU ms per child",
        "cpu_ms_per_child",
        "ours_fanout",
        [("OpenWorkflow", "ow_fanout")],
        "lower",
    ),
    (
        "fan-out: write transactions per child (cluster-wide xid delta)",
        "write_txn_per_child",
        "ours_fanout",
        [("OpenWorkflow", "ow_fanout")],
        "lower",
    ),
    (
        "latency p50, start -> native wait returned (result())",
        "native_p50_ms",
        "ours_lat",
        [
            ("OpenWorkflow", "ow_lat"),
            ("DBOS (poll 10 ms)", "dbos_lat_poll0.01"),
            ("Celery (prefork 2)", "celery_lat"),
            ("procrastinate", "proc_lat"),
        ],
        "lower",
    ),
]

# The targets for throughput ratios (ours / peer): 2x OpenWorkflow, 1.5x everyone else.
TARGETS = {"OpenWorkflow": 2.0}
DEFAULT_THR_TARGET = 1.5


def parse(path: str, prefix: str | None) -> tuple[dict, list[str], list[str]]:
    """-> {(round, cfg): [kv, ...]}, sorted rounds, FAIL lines."""
    data: dict[tuple[str, str], list[dict]] = defaultdict(list)
    rounds: set[str] = set()
    fails: list[str] = []
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line.startswith(("FAIL ", "SKIP ")):
                if prefix is None or f"run={prefix}" in line:
                    fails.append(line)
                continue
            if not line.startswith("RESULT "):
                continue
            kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
            run = kv.get("run", "")
            if prefix is not None and not run.startswith(prefix):
                continue
            m = re.search(r"_r(\d+)$", run)
            rnd = m.group(1) if m else run
            cfg = kv.get("cfg")
            if not cfg:
                continue
            rounds.add(rnd)
            data[(rnd, cfg)].append(kv)
    return data, sorted(rounds, key=lambda r: (len(r), r)), fails


def value(rows: list[dict], key: str) -> float | None:
    vals = []
    for r in rows:
        try:
            v = float(r.get(key, "nan"))
        except ValueError:
            continue
        if v == v:  # not NaN
            vals.append(v)
    return statistics.median(vals) if vals else None


def fmt(x: float | None, d: int = 1) -> str:
    return "-" if x is None else f"{x:.{d}f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--run-prefix", help="only RESULT lines whose run= starts with this (compare.sh's RUN_ID)")
    ap.add_argument("--per-round", action="store_true", help="also print each round's values, ours / peer")
    a = ap.parse_args()
    data, rounds, fails = parse(a.file, a.run_prefix)
    print(
        f"# ours / peer, median over {len(rounds)} round(s) ({', '.join(rounds) or 'none'}); "
        "ratio = median of per-round ratios [min..max]"
    )
    for section, key, ours_cfg, peers, better in COMPARISONS:
        ours_all = [value(data.get((r, ours_cfg), []), key) for r in rounds]
        ours_med = (
            statistics.median([v for v in ours_all if v is not None]) if any(v is not None for v in ours_all) else None
        )
        if ours_med is None and not any(
            value(data.get((r, cfg), []), key) is not None for r in rounds for _, cfg in peers
        ):
            continue  # not measured in these rounds (e.g. FANOUT_ONLY=1, or FANOUT=0)
        print(f"\n## {section}  [{key}; {'higher' if better == 'higher' else 'lower'} is better for us]")
        print(
            f"{'peer':28s} {'peer cfg':28s} {'ours':>9s} {'peer':>9s} {'ratio':>7s} {'[min..max]':>16s} {'n':>2s}"
            + ("  target" if key == THR else "")
        )
        for label, cfg in peers:
            ratios, peer_vals = [], []
            for r, ours_v in zip(rounds, ours_all, strict=True):
                peer_v = value(data.get((r, cfg), []), key)
                if peer_v is not None:
                    peer_vals.append(peer_v)
                if ours_v is not None and peer_v:
                    ratios.append(ours_v / peer_v)
            if not peer_vals and not ratios:
                continue
            peer_med = statistics.median(peer_vals) if peer_vals else None
            ratio = statistics.median(ratios) if ratios else None
            span = f"[{min(ratios):.2f}..{max(ratios):.2f}]" if ratios else "-"
            line = (
                f"{label:28s} {cfg:28s} {fmt(ours_med):>9s} {fmt(peer_med):>9s} {fmt(ratio, 2):>7s} "
                f"{span:>16s} {len(ratios):2d}"
            )
            if key == THR:
                target = TARGETS.get(label.split(" (")[0], DEFAULT_THR_TARGET)
                met = "-" if ratio is None else ("met" if ratio >= target else "NOT met")
                line += f"  >= {target:g}x: {met}"
            print(line)
            if a.per_round:
                d = 3 if key.endswith("_s") and not key.endswith("per_s") else 1  # seconds: 3 decimals
                vals = [
                    f"r{r} {fmt(ours_v, d)} / {fmt(value(data.get((r, cfg), []), key), d)}"
                    for r, ours_v in zip(rounds, ours_all, strict=True)
                ]
                print(f"{'':28s}   per round, ours / peer: {'; '.join(vals)}")
    ours_rows = [kv for (r, cfg), rows in data.items() if cfg.startswith("ours") for kv in rows]
    not_ok = [kv.get("cfg") for kv in ours_rows if kv.get("ok") == "false"]
    if not_ok:
        print(f"\n# WARNING: our runs not ok (incomplete or failed runs): {sorted(set(not_ok))}")
    capped = sorted(
        {
            (kv.get("cfg"), kv.get("conc"))
            for kv in ours_rows
            if kv.get("cfg") == "ours_c100" and kv.get("conc") != "100"
        }
    )
    if capped:
        print(
            f"# NOTE: ours_c100 ran at concurrency {', '.join(c for _, c in capped)} "
            "(lowered to fit PostgreSQL max_connections; see bench/README.md)"
        )
    for f in fails:
        print(f)


if __name__ == "__main__":
    main()
