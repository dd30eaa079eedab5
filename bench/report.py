"""What the suite prints: figure lines, notes, and the RESULT lines at the end.

* figure lines: ``<db>.<figure> <value> <unit (explanation)>``, printed as each figure is
  measured (``<db>`` is ``pg``, ``sqlite`` or ``mariadb``);
* notes: ``# <db>: <text>``;
* ``RESULT peer=ours key=value ...``: one line per throughput configuration, one for
  latency and one for the fan-out (``mode=fanout``). The keys are the ones the peers' benchmarks in ../shared/bench-peers print
  (``wall_s wf_per_s steps_per_s enqueue_s completed failed steps_done cpu_util_pct
  cpu_ms_per_wf write_txn_per_wf wal_kb_per_wf lat_p50_ms lat_p90_ms native_p50_ms`` ...),
  so that bench/compare.py (and the peers' summarize.py) read ours next to theirs.
  This module writes them itself: nothing outside the repository is imported.

bench/compare.sh, bench/compare.py and CI parse these lines: names, units and fields are
an interface.
"""

from __future__ import annotations

import math
import time

NAN = float("nan")

# optional throughput fields, in this order, when the database measured them
THROUGHPUT_EXTRA_FIELDS = (
    "write_txn_per_wf",
    "wal_kb_per_wf",
    "commits_per_wf",
    "commits_per_step",
    "handler_commits_per_wf",
    "redo_kb_per_wf",
)


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile: the smallest sample with at least q % of the samples at or below it."""
    s = sorted(xs)
    if not s:
        return NAN
    idx = min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))
    return s[idx]


def fmt(x: float | None, d: int = 1) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return "nan"
    if isinstance(x, int):
        return str(x)
    return f"{x:.{d}f}"


def emit(short: str, name: str, value, unit: str, d: int = 1) -> None:  # type: ignore[no-untyped-def]
    print(f"{short}.{name} {fmt(value, d)} {unit}", flush=True)


def note(short: str, text: str) -> None:
    print(f"# {short}: {text}", flush=True)


# --------------------------------------------------------------------------- RESULT lines


def throughput_fields(db: str, r: dict) -> list[str]:
    """The key=value fields of one throughput configuration's result (``throughput.measure``)."""
    done, wall = r["completed"], r["wall_s"]
    parts = [
        f"mode={r['mode']}",
        f"n={r['n']}",
        f"conc={r['conc_effective']}",
        f"steps={r['steps']}",
        f"db={db}",
        f"wall_s={fmt(wall, 2)}",
        f"wf_per_s={fmt(done / wall if wall else NAN)}",
        f"steps_per_s={fmt(r['steps_done'] / wall if wall else NAN)}",
        f"enqueue_s={fmt(r['enqueue_s'], 2)}",
        f"completed={done}",
        f"failed={r['failed']}",
        f"steps_done={r['steps_done']}",
        f"cpu_util_pct={fmt(r['cpu_util_pct'], 0)}",
        f"cpu_ms_per_wf={fmt(r['cpu_ms_per_wf'], 2)}",
        f"worker_cpu_pct={fmt(r['worker_cpu_pct'], 0)}",
        f"load1={fmt(r['load1'], 2)}",
    ]
    for k in THROUGHPUT_EXTRA_FIELDS:
        if k in r:
            parts.append(f"{k}={fmt(r[k], 2)}")
    return parts


def throughput_line(db: str, cfg: str, r: dict, ts: str) -> str:
    return " ".join(
        [
            "RESULT",
            "peer=ours",
            *throughput_fields(db, r),
            "lat_n=0",
            f"ok={str(r['ok']).lower()}",
            f"ts={ts}",
            f"cfg={cfg}",
        ]
    )


def latency_line(db: str, cfg: str, la: list[float], na: list[float], gap: int, ts: str) -> str:
    """``la``: start -> finished_at (ms), ``na``: start -> handle.result() returned (ms)."""
    return " ".join(
        [
            "RESULT",
            "peer=ours",
            "mode=live",
            "n=0",
            "conc=20",
            f"db={db}",
            "wall_s=nan",
            "wf_per_s=nan",
            "steps_per_s=nan",
            f"lat_n={len(la)}",
            f"lat_gap_ms={gap}",
            f"lat_p50_ms={fmt(pct(la, 50))}",
            f"lat_p90_ms={fmt(pct(la, 90))}",
            f"lat_p95_ms={fmt(pct(la, 95))}",
            f"lat_p99_ms={fmt(pct(la, 99))}",
            f"lat_min_ms={fmt(min(la))}",
            f"native_p50_ms={fmt(pct(na, 50))}",
            f"native_p90_ms={fmt(pct(na, 90))}",
            f"native_p95_ms={fmt(pct(na, 95))}",
            f"native_p99_ms={fmt(pct(na, 99))}",
            "ok=true",
            f"ts={ts}",
            f"cfg={cfg}",
        ]
    )


def fanout_line(db: str, cfg: str, r: dict, ts: str) -> str:
    """The fan-out's result (``phases.fanout.measure``); OpenWorkflow's counterpart,
    bench/peers/fanout_openworkflow.mjs, prints the same fields."""
    return " ".join(
        [
            "RESULT",
            "peer=ours",
            "mode=fanout",
            f"n={r['n']}",
            f"conc={r['conc_effective']}",
            f"db={db}",
            f"wall_s={fmt(r['wall_s'], 3)}",
            f"children_per_s={fmt(r['children_per_s'])}",
            f"server_wall_s={fmt(r['server_wall_s'], 3)}",
            f"children_done_s={fmt(r['children_done_s'], 3)}",
            f"distinct_children={r['distinct_children']}",
            f"cpu_util_pct={fmt(r['cpu_util_pct'], 0)}",
            f"cpu_ms_per_child={fmt(r['machine_cpu_ms_per_child'], 2)}",
            f"worker_cpu_pct={fmt(r['worker_cpu_pct'], 0)}",
            f"write_txn_per_child={fmt(r['write_txn_per_child'], 2)}",
            f"load1={fmt(r['load1'], 2)}",
            "lat_n=0",
            f"ok={str(r['ok']).lower()}",
            f"ts={ts}",
            f"cfg={cfg}",
        ]
    )


def result_lines(
    db: str,
    cfg_prefix: str,
    thr_rows: list[tuple[str, dict]],
    lat: tuple[list[float], list[float], int] | None,
    tag: str,
    fanout: dict | None = None,
) -> list[str]:
    """Every RESULT line of one database's run; ``tag`` (``--tag``) is appended to each."""
    tag = (" " + tag.strip()) if tag.strip() else ""
    ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = [throughput_line(db, cfg, r, ts) + tag for cfg, r in thr_rows]
    if lat is not None:
        la, na, gap = lat
        if la:
            lines.append(latency_line(db, f"{cfg_prefix}_lat", la, na, gap, ts) + tag)
    if fanout is not None:
        lines.append(fanout_line(db, f"{cfg_prefix}_fanout", fanout, ts) + tag)
    return lines
