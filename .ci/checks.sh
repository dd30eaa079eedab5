# The checks .ci/run is made of: each runs, passes or fails on its own, and the summary says
# which failed and why. Sourced by .ci/run (and by tests/test_ci_checks.py, which proves the summary).
# shellcheck shell=bash

section() { printf '\n===== %s =====\n' "$*"; }

# Checks run one after another; a failing one does not hide the others' results.
# Each is killed (with everything it started) after CI_STEP_TIMEOUT seconds, so a
# hung check fails the build instead of stalling it (a hung test fails sooner, by
# name: pytest-timeout). CI's make test runs three legs (SQLite; PostgreSQL, every test on
# Django 6; MariaDB): about 14 minutes on a quiet 2-core machine, 30 at load 8.
CI_STEP_TIMEOUT="${CI_STEP_TIMEOUT:-2700}"
# A failed check's output is kept and its failure lines and tail printed again in the summary:
# whoever reads only the end of the log still learns why it failed.
# Every check's wall time and its test legs' figures are printed again in the summary too, so the
# next session knows where CI's time went.
failed=()
declare -A failed_log
timings=()
legs=()
check() {
    local name="$1" log rc=0 started=$SECONDS; shift
    section "$name"
    log="$(mktemp "${TMPDIR:-/tmp}/ci-check.XXXXXX")"
    timeout -k 30 "$CI_STEP_TIMEOUT" "$@" 2>&1 | tee "$log" || rc=$?
    outcome "$name" "$rc" "$log" $((SECONDS - started))
}

# A check's verdict from its exit status and its wall time; a failed one's log is kept for the summary.
outcome() {
    local name="$1" rc="$2" log="$3" took="$4" verdict
    legs+=("$(leg_lines "$name" "$log")")
    if [ "$rc" -eq 0 ]; then
        verdict=ok
        rm -f "$log"
    else
        verdict="FAILED (exit $rc)"
        [ "$rc" -eq 124 ] && echo "----- $name: timed out after ${CI_STEP_TIMEOUT}s"
        failed+=("$name")
        failed_log[$name]="$log"
    fi
    echo "----- $name: $verdict in ${took}s"
    timings+=("$(printf '%6ss  %s: %s' "$took" "$name" "$verdict")")
}

# What a check's pytest legs said of themselves (the Makefile's "==> ... leg" lines, pytest's
# slowest tests and closing line), for the summary; nothing for a check that ran no pytest.
leg_lines() {
    local name="$1" log="$2"
    grep -qE '^==> .* leg took|slowest [0-9]+ durations' "$log" || return 0
    echo "----- $name"
    grep -E '^==> |^[0-9.]+s (call|setup|teardown) |^(=+ )?[0-9]+ (passed|failed|error).* in [0-9.]+s' "$log" \
        | grep -vE '^==> (installing|DATABASE_URL|MARIADB_URL)' || true
}

# Checks that mostly wait on the package index (a fresh venv's install, a tox env's) start
# early in the background, beside the test suites, and are waited for further down: each
# counts, passes or fails, like any other check, and its output is printed when it ends.
declare -A bg_pid bg_log
declare -A bg_started
background() {
    local name="$1"; shift
    bg_log[$name]="$(mktemp "${TMPDIR:-/tmp}/ci-background.XXXXXX")"
    bg_started[$name]=$SECONDS
    timeout -k 30 "$CI_STEP_TIMEOUT" "$@" >"${bg_log[$name]}" 2>&1 &
    bg_pid[$name]=$!
}
collect() {
    local name="$1" rc=0
    section "$name (started in the background)"
    wait "${bg_pid[$name]}" || rc=$?
    cat "${bg_log[$name]}"
    # From its start to the wait's end: the background check's own time is at most that.
    outcome "$name" "$rc" "${bg_log[$name]}" $((SECONDS - bg_started[$name]))
}

# The summary: each failed check's FAIL lines and tail again, then the verdict (the exit status).
summary() {
    section "summary"
    echo "----- each check's wall time (a background check's: from its start until it was waited for)"
    printf '%s\n' "${timings[@]}"
    printf '%s\n' "${legs[@]}" | grep -v '^$' || true
    echo "----- CI took ${SECONDS}s"
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
