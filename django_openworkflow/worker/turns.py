"""The workers' periodic sweeps (retention's prune, priority aging): one process per interval gets the turn.

Each sweep is a :class:`TurnSweeper` thread of its own in every worker; at
each look it asks :func:`take_turn`, and only the first process to ask in an
interval of the database clock sweeps. A sweep never takes a claim slot.
"""

from __future__ import annotations

import logging
import random
import threading
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, IntegrityError, connections, transaction


def take_turn(prefix: str, interval: timedelta) -> bool:
    """Whether this process may sweep now: the first to ask in each interval (database clock) gets the turn.

    The turn is a row of the gate table named after ``prefix`` and the
    interval's number: inserting it succeeds for exactly one process (its
    primary key decides), so two workers never sweep the same interval.
    Earlier turns' rows are deleted as the next one is taken.
    """
    from ..models import Gate
    from ..store import get_backend

    backend = get_backend()
    now = backend.now()
    number = int(now.timestamp() // interval.total_seconds())
    name = f"{prefix}{number}"
    with backend.write_lock():
        try:
            with transaction.atomic(using=backend.alias):
                Gate.objects.create(name=name)
        except IntegrityError:
            return False
        Gate.objects.filter(name__startswith=prefix).exclude(name=name).delete()
    return True


class TurnSweeper(threading.Thread):
    """A worker's thread that calls :meth:`sweep` about every ``look_every`` when it gets the interval's turn.

    A failing sweep is logged and tried again at the next look. ``stop`` is
    thread-safe; ``sweeps`` is written by this thread only (others may read
    it).
    """

    turn_prefix = ""  # the gate rows of this sweep's turns
    what = "sweep"  # for the log

    def __init__(self, name: str, interval: timedelta, logger: logging.Logger, look_every: timedelta | None = None):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.look_every = look_every or interval
        self.logger = logger
        self._stop_event = threading.Event()
        self.sweeps = 0

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        seconds = self.look_every.total_seconds()
        # A first look soon after start (jittered), then about once every look_every.
        wait = random.uniform(0.1, min(seconds, 5.0))
        try:
            while not self._stop_event.wait(wait):
                self.sweep_once()
                wait = seconds * random.uniform(0.8, 1.2)
        finally:
            connections.close_all()

    def sweep(self) -> Any:
        """One sweep (this process has the turn); what it did, for :meth:`sweep_once`'s caller."""
        raise NotImplementedError

    def sweep_once(self) -> Any:
        """Sweep if this worker gets the turn; what :meth:`sweep` returned, or None without the turn."""
        try:
            if not take_turn(self.turn_prefix, self.interval):
                return None
            done = self.sweep()
            self.sweeps += 1
            return done
        except (DatabaseError, ValueError) as exc:
            self.logger.warning("%s failed (%s); trying again in %s", self.what, exc, self.look_every)
            for wrapper in connections.all(initialized_only=True):
                wrapper.close()
            return None
        except Exception:  # never take the worker down
            self.logger.exception("%s failed; trying again in %s", self.what, self.look_every)
            return None
