#!/usr/bin/env bash
# The whole test suite, N times in a row, with the machine kept loaded; then every test that failed
# at least once, with its first failure. A test that needs a quiet machine fails CI one day: this
# finds it first. Reruns are not the fix (they hide the concurrency bugs the suite is for).
#
#   bench/flakes.sh                  5 runs on SQLite (every test), busy loops keep the load near 8
#   bench/flakes.sh -n 3 --load 12   3 runs, the load kept near 12
#   bench/flakes.sh --hog 3          3 busy loops, whatever the load
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/openworkflow bench/flakes.sh -n 2
#   bench/flakes.sh -- tests/worker  pytest's own arguments after --
#
# Exits 0 when no run failed. Each run's line gives its mean one-minute load (lowest-highest).
# The JUnit reports and load.log (epoch, load, busy loops; every 10 s) are kept in $FLAKES_DIR
# (default: a new temporary directory). Needs the development venv: `make .venv`.
set -euo pipefail
cd "$(dirname "$0")/.."
unset PYTHONDONTWRITEBYTECODE  # as make test: bytecode cached, not compiled again by every process

runs=5
hogs=""
target_load=8
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="$2"; shift 2 ;;
        --load) target_load="$2"; shift 2 ;;
        --hog) hogs="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/flakes.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
cores="$(nproc)"
# As many pytest processes as make test runs (the Makefile's PYTEST_WORKERS: two per core, at most 8).
workers="${PYTEST_WORKERS:-$(python3 -c 'import os; print(min(8, 2 * (os.cpu_count() or 1)))')}"
dir="${FLAKES_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flakes.XXXXXX")}"
mkdir -p "$dir"
python=.venv/bin/python
[ -x "$python" ] || { echo "bench/flakes.sh: no .venv; run make .venv first" >&2; exit 2; }

# A busy loop, bounded: it stops by itself after 3 hours even if this script is killed with -9.
hog() {
    exec python3 -c 'import time; end = time.monotonic() + 10800
while time.monotonic() < end: pass'
}

# Keeps the one-minute load near $target_load (or runs $hogs loops when --hog is given), and
# writes "epoch load busy-loops" to $dir/load.log every 10 s. Whatever else runs on the machine
# counts: with other work beside it, it runs fewer loops, or none. The load average follows a
# change within a minute, so it adds or removes one loop at a time, outside a band of ±1.
governor() {
    local pids=() load
    trap 'kill "${pids[@]}" 2>/dev/null; exit 0' TERM
    if [ -n "$hogs" ]; then
        for _ in $(seq 1 "$hogs"); do hog & pids+=($!); done
    fi
    while true; do
        read -r load _ </proc/loadavg
        if [ -z "$hogs" ]; then
            if awk -v l="$load" -v t="$target_load" 'BEGIN { exit !(l < t - 1) }' && ((${#pids[@]} < 2 * cores + 2)); then
                hog & pids+=($!)
            elif awk -v l="$load" -v t="$target_load" 'BEGIN { exit !(l > t + 1) }' && ((${#pids[@]} > 0)); then
                kill "${pids[-1]}" 2>/dev/null; unset 'pids[-1]'
            fi
        fi
        echo "$(date +%s) $load ${#pids[@]}" >>"$dir/load.log"
        sleep 10 & wait $!
    done
}
governor &
governor_pid=$!
stop_governor() { kill "$governor_pid" 2>/dev/null; wait "$governor_pid" 2>/dev/null || true; }
trap stop_governor EXIT

echo "flakes: $runs run(s) of the suite on ${DATABASE_URL:+$(printf '%s' "$DATABASE_URL" | sed -E 's|(//[^:/@]*):[^@]*@|\1:***@|')}${DATABASE_URL:-SQLite}," \
     "$workers pytest processes on $cores cores, ${hogs:+$hogs busy loop(s)}${hogs:-load kept near $target_load}, reports in $dir"
status=0
for i in $(seq 1 "$runs"); do
    started=$SECONDS
    since=$(date +%s)
    rc=0
    "$python" -m pytest -q -n "$workers" --dist worksteal -p no:cacheprovider --junitxml="$dir/run-$i.xml" "$@" \
        >"$dir/run-$i.log" 2>&1 || rc=$?
    load=$(awk -v since="$since" '$1 >= since { n++; s += $2; if (n == 1 || $2 < lo) lo = $2; if ($2 > hi) hi = $2 }
        END { if (n) printf "load %.1f (%.1f-%.1f)", s / n, lo, hi; else printf "load ?" }' "$dir/load.log" 2>/dev/null)
    echo "run $i: exit $rc in $((SECONDS - started)) s, $load: $(tail -n 1 "$dir/run-$i.log")"
    [ "$rc" -eq 0 ] || status=1
done
stop_governor
trap - EXIT

# Every test that failed (or errored) in any run: how often, and its first failure's message.
"$python" - "$dir" "$runs" <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

directory, runs = Path(sys.argv[1]), int(sys.argv[2])
failures: dict[str, list[tuple[int, str]]] = {}
for i in range(1, runs + 1):
    report = directory / f"run-{i}.xml"
    if not report.exists():
        failures.setdefault(f"(run {i} wrote no report: see {directory}/run-{i}.log)", []).append((i, ""))
        continue
    for case in ET.parse(report).iter("testcase"):
        for problem in [*case.iter("failure"), *case.iter("error")]:
            name = f"{case.get('classname')}::{case.get('name')}"
            first_line = (problem.get("message") or problem.text or "").strip().splitlines()[:1]
            failures.setdefault(name, []).append((i, first_line[0][:300] if first_line else ""))
if not failures:
    print(f"flakes: no test failed in {runs} run(s)")
for name, seen in sorted(failures.items(), key=lambda item: -len(item[1])):
    runs_seen = ", ".join(str(i) for i, _ in seen)
    print(f"FLAKY {name}: failed in run(s) {runs_seen}; first: {seen[0][1]}")
PY
exit "$status"
