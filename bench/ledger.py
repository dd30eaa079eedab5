"""The soak phase's ledger, read back: what every step body, slice end and heartbeat recorded.

The workers append to ``ledger-<pid>.log`` files (format in bench/benchapp/soak.py); the
starter appends one line per run it started to ``starts.log``. :class:`Ledger` reads both
incrementally (only whole lines; a line still being written is read next time) and
answers the phase's questions: how many step executions beyond the first, which of them
a kill excuses, and whether a concurrency key ever had more step bodies at once than its
limit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path


@dataclasses.dataclass
class Execution:
    """One execution of a step body, as its worker recorded it."""

    run_id: str
    step: str
    pid: int
    start: float
    due: float
    key: str | None  # the concurrency key, None for a run without a limit
    end: float | None = None  # None: the body never returned (killed, or still running)


class Ledger:
    """Everything the workers and the starter wrote so far; :meth:`read` takes what is new.

    Read and used by the orchestrator's one thread only.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets: dict[str, int] = {}
        self.executions: dict[tuple[str, str], list[Execution]] = {}
        self._running: dict[tuple[str, str, str, str], Execution] = {}  # (run, step, pid, tid): no E line yet
        self.completed_by: dict[str, set[int]] = {}  # run id -> pids whose slice completed it
        self.completions: list[float] = []  # times of C lines with outcome "completed"
        self.pickups: list[tuple[float, float, bool]] = []  # (first start, start - due, limited)
        self.renewals: list[tuple[float, int, int]] = []  # (time, pid, leases extended)
        self.beat_ms: dict[int, float] = {}  # pid -> the longest heartbeat UPDATE, ms
        self.starts: list[float] = []  # when the starter called run()
        self.start_errors: list[str] = []
        self.extra = 0  # executions beyond the first of their (run, step), excused or not

    # ---- reading

    def _new_lines(self, path: Path) -> Iterable[str]:
        name = str(path)
        offset = self._offsets.get(name, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except OSError:
            return []
        whole = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        self._offsets[name] = offset + whole
        return data[:whole].decode().splitlines()

    def read(self) -> None:
        for path in sorted(self.directory.glob("ledger-*.log")):
            for line in self._new_lines(path):
                self._worker_line(line.split())
        for line in self._new_lines(self.directory / "starts.log"):
            fields = line.split(maxsplit=5)
            if fields[0] == "X":
                self.start_errors.append(line)
            else:
                self.starts.append(float(fields[1]))

    def _worker_line(self, f: list[str]) -> None:
        kind = f[0]
        if kind == "S":
            ex = Execution(f[2], f[3], int(f[4]), float(f[1]), float(f[6]), None if f[7] == "-" else f[7])
            runs = self.executions.setdefault((ex.run_id, ex.step), [])
            if runs:
                self.extra += 1
            else:
                self.pickups.append((ex.start, ex.start - ex.due, ex.key is not None))
            runs.append(ex)
            self._running[(f[2], f[3], f[4], f[5])] = ex
        elif kind == "E":
            ex = self._running.pop((f[2], f[3], f[4], f[5]), None)
            if ex is not None:
                ex.end = float(f[1])
        elif kind == "C":
            if f[4] == "completed":
                self.completions.append(float(f[1]))
                self.completed_by.setdefault(f[2], set()).add(int(f[3]))
        elif kind == "R":
            pid = int(f[2])
            self.renewals.append((float(f[1]), pid, int(f[3])))
            if len(f) > 4:
                self.beat_ms[pid] = max(self.beat_ms.get(pid, 0.0), float(f[4]))

    def beat_gaps(self) -> dict[int, float]:
        """Per worker, the longest time between two of its heartbeat UPDATEs (seconds).

        The heartbeat beats every lease/3: a gap near the lease means the
        leases nearly lapsed (a stalled machine, or an UPDATE that waited).
        """
        last: dict[int, float] = {}
        gaps: dict[int, float] = {}
        for at, pid, _ in sorted(self.renewals):
            if pid in last:
                gaps[pid] = max(gaps.get(pid, 0.0), at - last[pid])
            last[pid] = at
        return gaps

    # ---- the checks

    def interrupted(self, ex: Execution, killed: dict[int, float]) -> bool:
        """Started by a worker that was SIGKILLed before its slice completed the run."""
        return ex.pid in killed and ex.pid not in self.completed_by.get(ex.run_id, set())

    def unexcused(self, killed: dict[int, float]) -> list[list[Execution]]:
        """The (run, step)s that executed more often than once plus the kills that interrupted them."""
        bad = []
        for runs in self.executions.values():
            if len(runs) > 1:
                excused = sum(1 for ex in runs if self.interrupted(ex, killed))
                if len(runs) - 1 > excused:
                    bad.append(runs)
        return bad

    def overlaps(self, limit: int, killed: dict[int, float], now: float) -> list[tuple[str, float, int]]:
        """(key, time, bodies) each time a key had more than ``limit`` step bodies executing at once.

        A body ends at its E line; one that never returned ends when its worker was
        killed, or ``now``.
        """
        by_key: dict[str, list[tuple[float, int]]] = {}
        for runs in self.executions.values():
            for ex in runs:
                if ex.key is None:
                    continue
                end = ex.end if ex.end is not None else killed.get(ex.pid, now)
                events = by_key.setdefault(ex.key, [])
                events += [(ex.start, 1), (end, -1)]
        found = []
        for key, events in sorted(by_key.items()):
            inside = 0
            for at, delta in sorted(events):  # at the same instant an end (-1) sorts before a start
                inside += delta
                if inside > limit:
                    found.append((key, at, inside))
        return found

    def executed_runs(self) -> set[str]:
        return {run_id for run_id, _ in self.executions}


def self_check(directory: Path) -> list[str]:
    """Prove the checks on a made-up ledger; returns what did not come out as it must (empty: fine).

    Worker 101 executes run a twice, the second time with a body still open when it is
    "killed"; worker 102 executes run b twice, both to the end (a re-execution no kill
    explains); three bodies of key 0 overlap under a limit of 2; worker 103 executes run c
    twice at once on two threads (each E line must end its own execution).
    """
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ledger-101.log").write_text(
        "S 10.0 a work 101 7 9.9 -\nE 10.1 a work 101 7\n"  # finished, but its slice did not complete the run
        "S 14.0 a work 101 7 9.9 -\n"  # the kill interrupts this one
        "S 20.0 k1 work 101 7 19.0 0\nS 20.5 k2 work 101 7 19.0 0\nE 21.0 k1 work 101 7\nE 21.5 k2 work 101 7\n"
        "R 11.0 101 3\nR 12.0 101 2 40.5\nR 14.5 101 0 7.0\n"  # the first written before the UPDATE's time was
    )
    (directory / "ledger-102.log").write_text(
        "S 15.0 a work 102 7 9.9 -\nE 15.1 a work 102 7\nC 15.2 a 102 completed\n"
        "S 10.0 b work 102 7 9.9 -\nE 10.1 b work 102 7\nS 14.0 b work 102 7 9.9 -\nE 14.1 b work 102 7\nC 14.2 b 102 completed\n"
        "S 20.7 k3 work 102 7 19.0 0\nE 20.8 k3 work 102 7\n"
    )
    (directory / "ledger-103.log").write_text(
        "S 30.0 c work 103 1 29.0 -\nS 33.0 c work 103 2 29.0 -\nE 34.5 c work 103 1\nE 37.5 c work 103 2\n"
    )
    (directory / "starts.log").write_text("0 9.9 9.91 a 0\n1 9.9 9.91 b 0\n")
    ledger = Ledger(directory)
    ledger.read()
    wrong = []
    if ledger.extra != 4:
        wrong.append(f"extra executions: {ledger.extra}, not 4")
    unexcused = sorted(runs[0].run_id for runs in ledger.unexcused({101: 14.5}))
    if unexcused != ["b", "c"]:
        wrong.append(f"unexcused with worker 101 killed: {unexcused}, not ['b', 'c']")
    if len(ledger.unexcused({})) != 3:
        wrong.append("without kills, the three re-executed runs must be unexcused")
    if [ex.end for ex in ledger.executions[("c", "work")]] != [34.5, 37.5]:
        wrong.append(f"run c's executions end at {[ex.end for ex in ledger.executions[('c', 'work')]]}")
    overlaps = ledger.overlaps(2, {}, 30.0)
    if [(key, at, inside) for key, at, inside in overlaps] != [("0", 20.7, 3)]:
        wrong.append(f"overlaps under a limit of 2: {overlaps}, not [('0', 20.7, 3)]")
    if ledger.overlaps(3, {}, 30.0):
        wrong.append("an overlap of 3 bodies under a limit of 3")
    if ledger.beat_gaps() != {101: 2.5} or ledger.beat_ms != {101: 40.5}:
        wrong.append(f"heartbeat gaps {ledger.beat_gaps()} or longest UPDATE {ledger.beat_ms}, not 2.5 s and 40.5 ms")
    if sum(rows for _, _, rows in ledger.renewals) != 5 or len(ledger.completions) != 2:
        wrong.append("renewals or completions misread")
    return wrong
