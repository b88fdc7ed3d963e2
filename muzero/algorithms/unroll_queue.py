"""A bounded FIFO of unrolls between the step-streaming service and an on-policy learner.

``put`` blocks while the queue is full: the inference call that completed the unroll
waits, and with it the actors of that batch (SEED's back-pressure: acting never runs
more than about one batch ahead of training). ``close`` wakes every waiter; a put
after close drops its unroll and returns False. So does a put waiting when the run's
``stop_event`` is set: at shutdown the learner no longer takes batches, and an actor's
call blocked here would otherwise hold up the actors' exit until they are killed.

Imports only the standard library and numpy.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Optional


class UnrollQueue:
    """FIFO of unroll dicts with capacity ``capacity`` (unrolls)."""

    # How often a put waiting on a full queue looks at ``stop_event``.
    STOP_POLL_S = 0.1

    def __init__(self, capacity: int, stop_event: Optional[threading.Event] = None):
        if capacity < 1:
            raise ValueError(f"UnrollQueue capacity={capacity} must be >= 1")
        self.capacity = capacity
        self._stop = stop_event
        self._items: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0   # unrolls offered after close

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, unroll: dict, timeout: Optional[float] = None) -> bool:
        """Appends ``unroll``, waiting while full; False if closed, stopped (or timed out) first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._items) >= self.capacity and not self._closed:
                if self._stop is not None and self._stop.is_set():
                    self.dropped += 1
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                if self._stop is not None:
                    remaining = self.STOP_POLL_S if remaining is None else min(remaining, self.STOP_POLL_S)
                self._cond.wait(remaining)
            if self._closed:
                self.dropped += 1
                return False
            self._items.append(unroll)
            self._cond.notify_all()
            return True

    def get_batch(self, count: int, timeout: float) -> Optional[list]:
        """The ``count`` oldest unrolls, or None if fewer arrived within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._items) < count and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)
            if len(self._items) < count:
                return None
            out = [self._items.popleft() for _ in range(count)]
            self._cond.notify_all()
            return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
