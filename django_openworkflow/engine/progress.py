"""``ctx.publish``, ``ctx.stream(name).write`` and ``ctx.set_attribute``: what a run tells while it works.

All three are written with the journal.

Neither writes at once. Each call is buffered among the slice's pending
changes and committed by the next journal write (a step's start, a sleep or
wait, the run's end), in the same fenced transaction: a worker that lost
the run writes none of it, and a reader sees the progress of a step
boundary as a whole.

Replay: the workflow function runs again from the top on every slice, so
these calls run again too. Each carries its position in the run's
deterministic execution (a chunk: its offset in its stream; a value: how
many progress calls came before it in this pass), and the store writes
nothing for a position it holds already. So a chunk is in its stream once,
in order, however often the worker dies; a value never goes back to an
older one.

They are refused inside a step's code: a completed step is not run again
on replay, so what it wrote could not be reproduced at the same position.
"""

from __future__ import annotations

from typing import Any

from ..definitions.attributes import check_value, declared_type
from ..definitions.payload import check_text, to_json_value
from ..errors import StepUsageError
from ..store.records import AttributeWrite, ProgressWrite
from .slice import Slice, current_step

__all__ = ["Progress", "RunStream"]

MAX_NAME_LENGTH = 255
"""The longest key or stream name (the columns' length)."""


class Progress:
    """The progress calls of one slice's pass through the workflow function.

    Confined to the slice's thread (``check_thread`` refuses any other):
    the counters need no lock.
    """

    def __init__(self, slice_: Slice) -> None:
        self._slice = slice_
        self._position = 0  # progress calls so far in this pass (values' positions)
        self._offsets: dict[str, int] = {}  # the next offset of each stream written in this pass

    def _check(self, api: str, name: Any, what: str) -> None:
        s = self._slice
        s.check_thread(api)
        running = s.in_step or current_step.get()
        if running is not None:
            raise StepUsageError(
                f"ctx.{api}() was called inside step {running!r}: publish and stream between steps "
                "(a completed step's code does not run again on replay, so what it wrote could not be replayed)"
            )
        if not isinstance(name, str) or not name.strip():
            raise StepUsageError(f"ctx.{api}(): the {what} must be a non-empty string, got {name!r}")
        if len(name) > MAX_NAME_LENGTH:
            raise StepUsageError(
                f"ctx.{api}(): the {what} {name[:40]!r}... is {len(name)} characters long; "
                f"the limit is {MAX_NAME_LENGTH}"
            )
        check_text(name, what)

    def publish(self, key: str, value: Any) -> None:
        """Set ``key``'s value; see :meth:`WorkflowContext.publish`."""
        self._check("publish", key, "key")
        stored = to_json_value(value, f"value published as {key!r}", "value")
        position = self._position
        self._position += 1
        pending = self._slice.pending
        # Once per step boundary: a later value of the key replaces one not written yet.
        for index, change in enumerate(pending):
            if isinstance(change, ProgressWrite) and change.stream is None and change.name == key:
                del pending[index]
                break
        pending.append(ProgressWrite(key, position, stored))

    def set_attribute(self, name: str, value: Any) -> None:
        """Set the run's typed attribute ``name``; see :meth:`WorkflowContext.set_attribute`."""
        s = self._slice
        self._check("set_attribute", name, "attribute name")
        where = f"ctx.set_attribute() in workflow {s.spec.name!r}"
        kind = declared_type(s.spec.attributes, name, where)
        stored = check_value(kind, value, name, where)
        position = self._position
        self._position += 1
        pending = s.pending
        # Once per step boundary: a later value of the attribute replaces one not written yet.
        for index, change in enumerate(pending):
            if isinstance(change, AttributeWrite) and change.name == name:
                del pending[index]
                break
        pending.append(AttributeWrite(name, position, kind, stored))

    def write(self, stream: str, chunk: Any) -> int:
        """Append ``chunk`` to ``stream``; returns its offset. See :meth:`RunStream.write`."""
        self._check("stream", stream, "stream name")
        stored = to_json_value(chunk, f"chunk of stream {stream!r}", "chunk")
        self._position += 1
        offset = self._offsets.get(stream, 0)
        self._offsets[stream] = offset + 1
        self._slice.pending.append(ProgressWrite(stream, offset, stored, stream=stream))
        return offset


class RunStream:
    """One named stream of the run: ``ctx.stream("tokens").write(chunk)``."""

    def __init__(self, progress: Progress, name: str) -> None:
        progress._check("stream", name, "stream name")
        self._progress = progress
        self.name = name

    def write(self, chunk: Any) -> int:
        """Append ``chunk`` (a JSON value) to the stream and return its offset (0 for the first).

        The chunk is committed with the run's next journal write (the next
        step's start, a sleep, a wait or the run's end), once: the replay of
        this call writes nothing. Readers see it then, in order
        (``handle.stream(name)``, the SSE view). Refused inside a step's
        code (:class:`StepUsageError`); a value that is not JSON raises
        :class:`PayloadError`.
        """
        return self._progress.write(self.name, chunk)

    def __repr__(self) -> str:
        return f"<RunStream {self.name!r}>"
