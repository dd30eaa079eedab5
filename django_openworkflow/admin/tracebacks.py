"""Tracebacks as the run page shows them: the user's own frame first, the package's frames folded.

A step's traceback runs through the engine (``engine/execute.py``,
``engine/run_steps.py`` ...) before it reaches the user's code; the frame
that matters is the last one outside this package, where the user's code
raised. :func:`fold` finds it and groups the package's frames, so the page
shows that frame first and the package's frames under a ``<details>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import django_openworkflow

PACKAGE_DIR = str(Path(django_openworkflow.__file__).resolve().parent)
"""Frames whose file is under this directory are the package's own."""

_FRAME = re.compile(r'^  File "(?P<file>[^"]*)", line \d+')


@dataclass(frozen=True)
class Part:
    """A run of traceback lines: the package's own frames (``folded``, ``frames`` of them) or anything else."""

    text: str
    folded: bool = False
    frames: int = 0


@dataclass
class FoldedTraceback:
    """A traceback cut into parts, and the last frame of the user's code in it (empty if none)."""

    raised_in: str = ""
    parts: list[Part] = field(default_factory=list)


_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]django_openworkflow[/\\]")


def _is_package(path: str) -> bool:
    """Whether a frame's file is this package's (here, or installed elsewhere: a worker's path may differ)."""
    return path.startswith(PACKAGE_DIR + "/") or bool(_INSTALLED.search(path))


def _frames(lines: list[str]) -> list[tuple[str | None, list[str]]]:
    """The lines grouped: each frame (its file) with its source lines; other lines alone (file None)."""
    groups: list[tuple[str | None, list[str]]] = []
    for line in lines:
        match = _FRAME.match(line)
        if match:
            groups.append((match["file"], [line]))
        elif groups and groups[-1][0] is not None and line.startswith("    "):
            groups[-1][1].append(line)  # the frame's source line (and its ^^^^ markers)
        else:
            groups.append((None, [line]))
    return groups


def fold(traceback: str) -> FoldedTraceback:
    """``traceback`` with runs of the package's frames folded and the last user frame picked out."""
    result = FoldedTraceback()
    if not traceback:
        return result
    buffer: list[str] = []
    folded: list[str] = []
    count = 0

    def flush_plain() -> None:
        if buffer:
            result.parts.append(Part("\n".join(buffer)))
            buffer.clear()

    def flush_folded() -> None:
        nonlocal count
        if folded:
            result.parts.append(Part("\n".join(folded), folded=True, frames=count))
            folded.clear()
            count = 0

    for file, lines in _frames(traceback.rstrip("\n").split("\n")):
        if file is not None and _is_package(file):
            flush_plain()
            folded.extend(lines)
            count += 1
            continue
        flush_folded()
        buffer.extend(lines)
        if file is not None:
            result.raised_in = "\n".join(lines)
    flush_plain()
    flush_folded()
    return result
