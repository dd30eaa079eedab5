"""The suite's order under pytest-xdist: each process starts with its share of the slowest tests."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import SLOWEST, _start_each_process_with_its_share_of_the_slowest


def config(processes: int, dist: str = "worksteal") -> Any:
    options = {"dist": dist}
    return SimpleNamespace(
        workerinput={"workercount": processes}, getoption=lambda name, default=None: options.get(name, default)
    )


def items(fast: int, slow: int) -> list[Any]:
    made = [SimpleNamespace(nodeid=f"tests/test_a.py::test_{i}") for i in range(fast)]
    for i in range(slow):  # spread through the collection, as in file order
        made.insert(i * 7, SimpleNamespace(nodeid=f"{SLOWEST[0]}_{i}.py::test_it"))
    return made


def first_shares(collection: list[Any], processes: int) -> list[list[Any]]:
    """What xdist's worksteal scheduler sends each process first: contiguous shares, in order."""
    shares, unsent = [], list(collection)
    for process in range(processes):
        share = len(unsent) // (processes - process)
        shares.append(unsent[:share])
        del unsent[:share]
    return shares


@pytest.mark.parametrize(("processes", "fast", "slow"), [(4, 2400, 22), (4, 1700, 10), (3, 100, 7), (8, 50, 3)])
def test_each_process_starts_with_its_share_of_the_slowest(processes: int, fast: int, slow: int) -> None:
    collection = items(fast, slow)
    ordered = list(collection)
    _start_each_process_with_its_share_of_the_slowest(config(processes), ordered)  # type: ignore[arg-type]

    assert sorted(item.nodeid for item in ordered) == sorted(item.nodeid for item in collection)
    for share in first_shares(ordered, processes):
        heads = [item.nodeid.startswith(SLOWEST) for item in share]
        mine = sum(heads)
        assert slow // processes <= mine <= -(-slow // processes), [item.nodeid for item in share[:5]]
        assert heads == [True] * mine + [False] * (len(share) - mine)  # the slow ones first


@pytest.mark.parametrize(("processes", "dist"), [(0, "worksteal"), (1, "worksteal"), (4, "load")])
def test_the_order_is_kept_without_worksteal_processes(processes: int, dist: str) -> None:
    collection = items(100, 5)
    ordered = list(collection)
    _start_each_process_with_its_share_of_the_slowest(config(processes, dist), ordered)  # type: ignore[arg-type]
    assert ordered == collection
