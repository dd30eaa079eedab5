#!/usr/bin/env bash
# The whole test suite, N times in a row, while busy loops keep this machine loaded; then every test
# that failed at least once, with its first failure. A test that needs a quiet machine fails CI one
# day: this finds it first. Reruns are not the fix (they hide the concurrency bugs the suite is for).
#
#   bench/flakes.sh                  5 runs on SQLite (every test), load about 8 on 2 cores
#   bench/flakes.sh -n 3 --hog 4     3 runs, 4 busy loops
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/openworkflow bench/flakes.sh -n 2
#   bench/flakes.sh -- tests/worker  pytest's own arguments after --
#
# Exits 0 when no run failed. Each run's JUnit report is kept in $FLAKES_DIR (default: a new
# temporary directory). Needs the development venv: `make .venv`.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
hogs=""
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="$2"; shift 2 ;;
        --hog) hogs="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/flakes.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
cores="$(nproc)"
# As many pytest processes as make test runs (the Makefile's PYTEST_WORKERS: two per core, at most 8).
workers="${PYTEST_WORKERS:-$(python3 -c 'import os; print(min(8, 2 * (os.cpu_count() or 1)))')}"
# The suite's two processes per core (and their subprocesses) make a load of about 5 on 2 cores; each
# loop adds one. Two loops gave 6.6, six gave 14; three give about 8.
hogs="${hogs:-$((2 * cores - 1))}"
dir="${FLAKES_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/flakes.XXXXXX")}"
mkdir -p "$dir"
python=.venv/bin/python
[ -x "$python" ] || { echo "bench/flakes.sh: no .venv; run make .venv first" >&2; exit 2; }

hog_pids=()
stop_hogs() { ((${#hog_pids[@]})) && kill "${hog_pids[@]}" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
    # Bounded: it stops by itself after 3 hours even if this script is killed with -9.
    python3 -c 'import time; end = time.monotonic() + 10800
while time.monotonic() < end: pass' &
    hog_pids+=($!)
done

echo "flakes: $runs run(s) of the suite on ${DATABASE_URL:+$(printf '%s' "$DATABASE_URL" | sed -E 's|(//[^:/@]*):[^@]*@|\1:***@|')}${DATABASE_URL:-SQLite}," \
     "$workers pytest processes, $hogs busy loop(s) on $cores cores, reports in $dir"
status=0
for i in $(seq 1 "$runs"); do
    started=$SECONDS
    rc=0
    "$python" -m pytest -q -n "$workers" --dist worksteal -p no:cacheprovider --junitxml="$dir/run-$i.xml" "$@" \
        >"$dir/run-$i.log" 2>&1 || rc=$?
    read -r load1 _ </proc/loadavg
    echo "run $i: exit $rc in $((SECONDS - started)) s, load $load1: $(tail -n 1 "$dir/run-$i.log")"
    [ "$rc" -eq 0 ] || status=1
done
stop_hogs
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
