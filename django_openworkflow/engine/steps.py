"""``ctx.step``: the durable step API, composed of one mixin per kind of step."""

from __future__ import annotations

from .children import ChildSteps
from .run_steps import RunSteps
from .slice import Slice
from .waits import WaitSteps


class StepApi(RunSteps, ChildSteps, WaitSteps):
    """``ctx.step``: the durable primitives a workflow function calls.

    The primitives, by kind:

    - steps that run code (``run_steps.py``): :meth:`run`, :meth:`parallel`,
      :meth:`map`, and :meth:`sleep`;
    - child workflows (``children.py``): :meth:`run_workflow`,
      :meth:`start_workflow`, :meth:`wait_all`, :meth:`wait_first`;
    - waits for a message (``waits.py``): :meth:`wait_for_signal`,
      :meth:`wait_for_event`.

    Each works on the slice it was made for: its replay state and its journal.
    """

    def __init__(self, slice_: Slice) -> None:
        self._slice = slice_
