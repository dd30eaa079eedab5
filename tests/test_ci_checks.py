"""The CI script's checks (``.ci/checks.sh``): a failed check says why at the end of the log.

Only the end of a CI log reaches whoever reads a failed run (stop 38 saw its
summary line and nothing else), so the summary repeats each failed check's
failure lines and tail. Run with bash, as ``.ci/run`` runs them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash")


def ci(script: str, timeout_s: int = 60) -> subprocess.CompletedProcess[str]:
    """``script`` after ``.ci/checks.sh`` is sourced, under the options ``.ci/run`` sets."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\nsource .ci/checks.sh\n{script}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def after_summary(out: str) -> str:
    return out.split("===== summary =====", 1)[1]


def test_every_check_passing_ends_with_all_passed() -> None:
    done = ci('check "one" true\ncheck "two" echo fine\nsummary')
    assert done.returncode == 0, done.stdout + done.stderr
    assert "----- one: ok" in done.stdout and "----- two: ok" in done.stdout
    assert after_summary(done.stdout).rstrip().endswith("all CI steps passed")


def test_the_summary_gives_each_checks_time_and_its_test_legs_slowest_tests() -> None:
    leg = (
        "echo '==> pytest on SQLite'; echo '7.81s call     tests/a.py::test_slow'; "
        "echo '===== 3 passed, 2 deselected in 9.10s ====='; echo '==> the SQLite leg took 12 s'; echo noise"
    )
    done = ci(f'check "tests" bash -c "{leg}"\ncheck "lint" sleep 1\nsummary')
    assert done.returncode == 0, done.stdout + done.stderr
    end = after_summary(done.stdout)
    assert re.search(r"^ +[0-9]+s  tests: ok$", end, re.M) and re.search(r"^ +[1-9][0-9]*s  lint: ok$", end, re.M)
    legs = end.split("----- tests\n", 1)[1]
    assert legs.splitlines()[:4] == [
        "==> pytest on SQLite",
        "7.81s call     tests/a.py::test_slow",
        "===== 3 passed, 2 deselected in 9.10s =====",
        "==> the SQLite leg took 12 s",
    ]
    assert "noise" not in end and "----- lint\n" not in end  # a check without pytest legs has none
    assert re.search(r"^----- CI took [0-9]+s$", end, re.M)


def test_a_failed_check_is_explained_again_in_the_summary_and_the_others_still_run() -> None:
    noise = "; ".join(f"echo line {i}" for i in range(100))
    failing = f"echo 'soak FAILURE: 3 step executions beyond the first'; {noise}; exit 3"
    done = ci(f'check "soak" bash -c "{failing}"\ncheck "after" echo ran\nsummary')
    assert done.returncode == 1
    assert "----- soak: FAILED (exit 3)" in done.stdout
    assert "----- after: ok" in done.stdout  # a failure does not stop the checks after it
    end = after_summary(done.stdout)
    assert "soak FAILURE: 3 step executions beyond the first" in end  # far above its tail, found anyway
    assert "line 99" in end and "line 59" not in end  # its last 40 lines, no more
    assert end.rstrip().endswith("FAILED: soak")


def test_a_background_check_that_failed_is_explained_too() -> None:
    done = ci('background "install" bash -c "echo ERROR: no such package; exit 2"\ncollect "install"\nsummary')
    assert done.returncode == 1
    end = after_summary(done.stdout)
    assert "ERROR: no such package" in end and end.rstrip().endswith("FAILED: install")


def test_a_check_that_hangs_is_killed_and_says_so() -> None:
    done = ci('CI_STEP_TIMEOUT=1\ncheck "hangs" sleep 30\nsummary', timeout_s=45)
    assert done.returncode == 1
    assert "----- hangs: timed out after 1s" in done.stdout
    assert after_summary(done.stdout).rstrip().endswith("FAILED: hangs")
