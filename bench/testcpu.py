"""A pytest plugin: the CPU each test costs, its subprocesses included (a worker, runserver, Chromium).

CI's legs are CPU-bound on two cores, so a test's wall time says little of what
it costs the run: a test that waits on a subprocess for 20 s may cost 1 s of
CPU, and a browser test 30 s. This plugin puts each pytest process (each
pytest-xdist worker) in a cpuacct cgroup of its own, which every process it
starts inherits, and writes each test's CPU seconds, read from the cgroup before
and after the test, to a file. The database server's CPU is not counted.

Needs root and cgroup v1's cpuacct controller at /sys/fs/cgroup/cpuacct (as on
these machines)::

    .venv/bin/pytest -n 4 -p bench.testcpu                  # writes testcpu.log
    TESTCPU_LOG=/tmp/pg.log DATABASE_URL=postgres://... .venv/bin/pytest -n 4 -p bench.testcpu
    .venv/bin/python -m bench.testcpu testcpu.log           # per module, then the 25 dearest tests

Measurements, not tests: nothing here asserts a figure.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

CGROUPS = Path("/sys/fs/cgroup/cpuacct/owf-testcpu")
GROUP = pytest.StashKey[Path]()


def _usage(group: Path) -> int:
    """Nanoseconds of CPU the group's processes have used."""
    return int((group / "cpuacct.usage").read_text())


def pytest_configure(config: pytest.Config) -> None:
    group = CGROUPS / os.environ.get("PYTEST_XDIST_WORKER", "main")
    group.mkdir(parents=True, exist_ok=True)
    (group / "cgroup.procs").write_text(str(os.getpid()))  # this process; the ones it starts follow
    config.stash[GROUP] = group


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    group = item.config.stash[GROUP]
    before = _usage(group)
    try:
        return (yield)
    finally:
        seconds = (_usage(group) - before) / 1e9
        # One line per test, appended: the xdist workers write to the same file (short writes, O_APPEND).
        with open(os.environ.get("TESTCPU_LOG", "testcpu.log"), "a") as log:
            log.write(f"{seconds:.3f} {item.nodeid}\n")


def summary(path: str) -> str:
    """Per module, then the dearest tests, from a log the plugin wrote."""
    rows = (line.split(" ", 1) for line in Path(path).read_text().splitlines())
    per_test = [(float(cpu), nodeid) for cpu, nodeid in rows]
    per_module: Counter[str] = Counter()
    for cpu, nodeid in per_test:
        per_module[nodeid.split("::")[0]] += cpu
    lines = [f"{len(per_test)} tests, {sum(per_module.values()):.0f} s of CPU", "", "per module:"]
    lines += [f"{cpu:8.1f} s  {module}" for module, cpu in per_module.most_common(30)]
    lines += ["", "the dearest tests:"]
    lines += [f"{cpu:8.2f} s  {nodeid}" for cpu, nodeid in sorted(per_test, reverse=True)[:25]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(sys.argv[1] if len(sys.argv) > 1 else "testcpu.log"))
