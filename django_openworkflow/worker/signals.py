"""SIGTERM and SIGINT, acted on by a thread of their own rather than inside the signal handler.

A Python signal handler runs in the main thread between two of its
bytecodes, perhaps while that thread holds the lock of an ``Event`` it waits
on (``Event.wait()`` holds it briefly on the way in and out). A handler that
sets that Event waits for ever on a lock its own thread holds: SIGTERM hangs
the process instead of stopping it. So the handler here takes no lock: it
writes the signal's number to a pipe, and the ``owf-signals`` thread reads
it and calls ``on_signal``, where taking locks is safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

logger = logging.getLogger("django_openworkflow.worker")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def relayed_signals(on_signal: Callable[[int], None], *, second_exits: bool = False) -> Iterator[None]:
    """Inside, SIGTERM and SIGINT call ``on_signal(signum)`` on the ``owf-signals`` thread; after, the old handlers.

    With ``second_exits``, a second signal exits the process at once, with
    code 1. Only the main thread can install handlers: elsewhere this does
    nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    read_fd, write_fd = os.pipe()
    seen = [0]  # the main thread's only: the handler runs there

    def handler(signum: int, frame: FrameType | None) -> None:
        seen[0] += 1
        if second_exits and seen[0] > 1:
            os.write(2, b"second signal: exiting now; leases of in-flight runs will expire\n")
            os._exit(1)
        os.write(write_fd, bytes([signum]))  # no lock taken: see the module's docstring

    def relay() -> None:
        try:
            while data := os.read(read_fd, 16):
                for signum in data:
                    on_signal(signum)
        except Exception:  # a signal not acted on must not go unsaid
            logger.exception("the thread acting on SIGTERM and SIGINT stopped; stop this process with SIGKILL")
        finally:
            os.close(read_fd)

    thread = threading.Thread(target=relay, name="owf-signals", daemon=True)
    thread.start()
    previous = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
        os.close(write_fd)  # the thread acts on what is left, then reads the end of the pipe
        thread.join(5)
