"""The sample writer's inbox: bounded by what its items hold, so waiting happens here and nowhere else.

Each item has a cost (a sample batch: its cells; rows: their count; a flush or stop token: nothing).
`put` waits while the inbox already holds `capacity` or more, except that an empty inbox always takes
one item however large. A caller waiting here is a host's supervisor: it stops reading its agent,
whose ring keeps the samples. `close()` makes every waiting and later `put` raise `InboxClosed` at
once (the app is stopping: what was not committed is read again from the agents' rings next time).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any


class InboxClosed(RuntimeError):
    """The writer is stopping or stopped: nothing more is taken."""


class Empty(Exception):
    pass


class BoundedInbox:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._items: deque[tuple[Any, int]] = deque()
        self._held = 0
        self._closed = False
        self._cond = threading.Condition()
        self.waits = 0  # puts that had to wait: back-pressure that reached the producers

    @property
    def held(self) -> int:
        with self._cond:
            return self._held

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: Any, cost: int, *, timeout: float | None = None) -> None:
        """Add `item`; wait while the inbox is full. Raises InboxClosed, or TimeoutError after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            waited = False
            while not self._closed and cost > 0 and self._items and self._held + cost > self.capacity:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"the sample writer's inbox stayed full for {timeout:g} s")
                waited = True
                self._cond.wait(remaining)
            if self._closed:
                raise InboxClosed("the sample writer is stopping")
            self.waits += waited
            self._items.append((item, cost))
            self._held += cost
            self._cond.notify_all()

    def put_control(self, item: Any) -> None:
        """A token for the writer thread itself (stop): never waits, taken even when closed."""
        with self._cond:
            self._items.append((item, 0))
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Any:
        """The oldest item; raises Empty after `timeout` (0: do not wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._items:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Empty
                self._cond.wait(remaining)
            item, cost = self._items.popleft()
            self._held -= cost
            self._cond.notify_all()
            return item

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def discard(self, keep: Any) -> int:
        """Drop every queued item except those `keep(item)` accepts; returns the cost dropped."""
        with self._cond:
            kept = [(item, cost) for item, cost in self._items if keep(item)]
            dropped = self._held - sum(cost for _, cost in kept)
            self._items = deque(kept)
            self._held -= dropped
            self._cond.notify_all()
            return dropped
