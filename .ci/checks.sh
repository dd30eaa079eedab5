# The checks .ci/run is made of: each runs, passes or fails on its own, and the summary says
# which failed and why. Sourced by .ci/run (and by tests/test_ci_checks.py, which proves the summary).
# shellcheck shell=bash

section() { printf '\n===== %s =====\n' "$*"; }

# Checks run one after another; a failing one does not hide the others' results.
# Each is killed (with everything it started) after CI_STEP_TIMEOUT seconds, so a
# hung test fails the build instead of stalling it. make test runs three suites
# (SQLite, PostgreSQL, MariaDB): about 8 minutes on a quiet 2-core machine, twice
# that when the machine is busy; the whole of CI about 20 minutes.
CI_STEP_TIMEOUT="${CI_STEP_TIMEOUT:-2700}"
# A failed check's output is kept and its failure lines and tail printed again in the summary:
# whoever reads only the end of the log still learns why it failed.
failed=()
declare -A failed_log
check() {
    local name="$1" log rc=0; shift
    section "$name"
    log="$(mktemp "${TMPDIR:-/tmp}/ci-check.XXXXXX")"
    timeout -k 30 "$CI_STEP_TIMEOUT" "$@" 2>&1 | tee "$log" || rc=$?
    outcome "$name" "$rc" "$log"
}

# A check's verdict from its exit status; a failed one's log is kept for the summary.
outcome() {
    local name="$1" rc="$2" log="$3"
    if [ "$rc" -eq 0 ]; then
        echo "----- $name: ok"
        rm -f "$log"
    else
        [ "$rc" -eq 124 ] && echo "----- $name: timed out after ${CI_STEP_TIMEOUT}s"
        echo "----- $name: FAILED (exit $rc)"
        failed+=("$name")
        failed_log[$name]="$log"
    fi
}

# Checks that mostly wait on the package index (a fresh venv's install, a tox env's) start
# early in the background, beside the test suites, and are waited for further down: each
# counts, passes or fails, like any other check, and its output is printed when it ends.
declare -A bg_pid bg_log
background() {
    local name="$1"; shift
    bg_log[$name]="$(mktemp "${TMPDIR:-/tmp}/ci-background.XXXXXX")"
    timeout -k 30 "$CI_STEP_TIMEOUT" "$@" >"${bg_log[$name]}" 2>&1 &
    bg_pid[$name]=$!
}
collect() {
    local name="$1" rc=0
    section "$name (started in the background)"
    wait "${bg_pid[$name]}" || rc=$?
    cat "${bg_log[$name]}"
    outcome "$name" "$rc" "${bg_log[$name]}"
}

# The summary: each failed check's FAIL lines and tail again, then the verdict (the exit status).
summary() {
    section "summary"
    if ((${#failed[@]})); then
        local name log
        for name in "${failed[@]}"; do
            log="${failed_log[$name]:-}"
            [ -n "$log" ] && [ -f "$log" ] || continue
            echo "----- $name: its lines that say FAIL, ERROR or Traceback (at most 30), then its last 40 lines"
            grep -E 'FAIL|ERROR|Error:|Traceback' "$log" | head -n 30 || true
            echo "..."
            tail -n 40 "$log"
        done
        printf 'FAILED: %s\n' "${failed[@]}"
        return 1
    fi
    echo "all CI steps passed"
}
