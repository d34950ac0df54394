"""The sample writer's inbox: bounded by what its items hold, fair between hosts, and the one place the
sample path waits.

Each item has a cost (a sample batch: its cells; rows: their count; a flush or stop token: nothing) and a
key (the host it is from). `put` waits while the inbox already holds `capacity` or more, or the key
already holds `key_capacity` (one host's flood takes its share, not the whole fleet's room) — except that
a key with nothing queued may always queue one item, however large: a host sending one sample a second
is never held back by another host's flood. The writer `get`s round-robin over the keys with something
queued, so a flood is written at the pace of its turn, not ahead of everyone. A caller waiting here is a
host's supervisor: it stops reading its agent, whose ring keeps the samples.

Tokens (a flush, a stop) are barriers: one is handed out only once everything put before it was, so
"everything submitted before this flush is committed" still holds. `close()` makes every waiting and later
`put` raise `InboxClosed` at once (the app is stopping: what was not committed is read again from the
agents' rings next time).

Waking is targeted: the writer waits on its own condition (woken by a put or a token), and a waiting
`put` on its key's (woken when its key's queue empties, or when the inbox drains to half its capacity).
At fleet size every host's supervisor may be waiting here at once; waking all of them on every item
taken (278 threads per take, each going back to sleep) cost more CPU than the writing itself.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any


class InboxClosed(RuntimeError):
    """The writer is stopping or stopped: nothing more is taken."""


class Empty(Exception):
    pass


class BoundedInbox:
    def __init__(self, capacity: int, key_capacity: int | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if key_capacity is not None and key_capacity < 1:
            raise ValueError(f"key_capacity must be at least 1, got {key_capacity}")
        self.capacity = capacity
        self.key_capacity = capacity if key_capacity is None else min(capacity, key_capacity)
        self._key_held: dict[Hashable, int] = {}
        self._queues: OrderedDict[Hashable, deque[tuple[int, Any, int]]] = OrderedDict()  # key -> (order, item, cost)
        self._tokens: deque[tuple[int, Any]] = deque()
        self._order = itertools.count()
        self._held = 0
        self._items = 0
        self._closed = False
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)  # the writer's: something was put
        self._room: dict[Hashable, threading.Condition] = {}  # key -> its waiting putters' (same lock)
        self._waiting: dict[Hashable, int] = {}
        self.waits = 0  # puts that had to wait: back-pressure that reached the producers

    @property
    def held(self) -> int:
        with self._cond:
            return self._held

    def __len__(self) -> int:
        with self._cond:
            return self._items + len(self._tokens)

    def put(self, item: Any, cost: int, *, key: Hashable = None, timeout: float | None = None) -> None:
        """Add `item` under `key`; wait while the inbox is full and `key` already has something queued.
        Raises InboxClosed, or TimeoutError after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            waited = False
            while (
                not self._closed
                and (self._held + cost > self.capacity or self._key_held.get(key, 0) + cost > self.key_capacity)
                and self._queues.get(key)
            ):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"the sample writer's inbox stayed full for {timeout:g} s")
                waited = True
                self._wait_for_room(key, remaining)
            if self._closed:
                raise InboxClosed("the sample writer is stopping")
            self.waits += waited
            self._queues.setdefault(key, deque()).append((next(self._order), item, cost))
            self._held += cost
            self._key_held[key] = self._key_held.get(key, 0) + cost
            self._items += 1
            self._cond.notify()

    def _wait_for_room(self, key: Hashable, timeout: float | None) -> None:
        room = self._room.get(key)
        if room is None:
            room = self._room[key] = threading.Condition(self._lock)
        self._waiting[key] = self._waiting.get(key, 0) + 1
        try:
            room.wait(timeout)
        finally:
            self._waiting[key] -= 1
            if not self._waiting[key]:
                del self._waiting[key], self._room[key]

    def _wake_room(self, key: Hashable | None = None) -> None:
        """Wake the putters of `key` (None: of every key)."""
        for waiting in [key] if key is not None else list(self._room):
            room = self._room.get(waiting)
            if room is not None:
                room.notify_all()

    def put_token(self, token: Any, *, control: bool = False) -> None:
        """A barrier (a flush; with `control`, the writer's own stop, taken even when closed): handed out
        once everything put before it has been. Never waits."""
        with self._cond:
            if self._closed and not control:
                raise InboxClosed("the sample writer is stopping")
            self._tokens.append((next(self._order), token))
            self._cond.notify()

    def get(self, timeout: float | None = None) -> Any:
        """The next item: a token once nothing older waits, else the next key's oldest item in turn;
        raises Empty after `timeout` (0: do not wait)."""
        return self.get_many(1, timeout)[0]

    def get_many(self, most: int, timeout: float | None = None) -> list[Any]:
        """Up to `most` items in `get` order, taken under one hold of the lock; waits like `get` for the first
        (raises Empty after `timeout`).

        The writer drains with this: one round trip through the lock (and the Python calls around it) per
        drain instead of per item, while ~280 supervisor threads put. (At 278 hosts after a slow connect
        storm the writer still starves: it loses the GIL every switch interval to ~100 runnable supervisors
        and waits ~0.7 s on average to get it back, measured; fewer lock calls do not change that share.)"""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while (taken := self._take()) is None:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise Empty
                self._cond.wait(remaining)
            items = [taken[0]]
            while len(items) < most and (taken := self._take()) is not None:
                items.append(taken[0])
            return items

    def _take(self) -> tuple[Any] | None:
        barrier = self._tokens[0][0] if self._tokens else None
        for key, queue in self._queues.items():  # round-robin: the key served goes to the back
            if barrier is not None and queue[0][0] > barrier:
                continue
            _, item, cost = queue.popleft()
            was_full = self._held >= self.capacity // 2
            key_was_full = self._key_held[key] >= self.key_capacity // 2
            self._held -= cost
            self._key_held[key] -= cost
            self._items -= 1
            if queue:
                self._queues.move_to_end(key)
                if key_was_full and self._key_held[key] < self.key_capacity // 2:
                    self._wake_room(key)  # its own share drained to half
            else:
                del self._queues[key], self._key_held[key]
                self._wake_room(key)  # its putter may always queue one item now
            if was_full and self._held < self.capacity // 2:
                self._wake_room()  # drained to half: whoever fits may put
            return (item,)
        if self._tokens:  # nothing older than the first token waits
            return (self._tokens.popleft()[1],)
        return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            self._wake_room()

    def discard(self, keep: Callable[[Any], bool]) -> int:
        """Drop every queued item and token `keep` does not accept; returns the cost dropped."""
        with self._cond:
            dropped = 0
            for key in list(self._queues):
                kept: deque[tuple[int, Any, int]] = deque()
                for entry in self._queues[key]:
                    if keep(entry[1]):
                        kept.append(entry)
                    else:
                        dropped += entry[2]
                        self._items -= 1
                if kept:
                    self._queues[key] = kept
                    self._key_held[key] = sum(entry[2] for entry in kept)
                else:
                    del self._queues[key]
                    self._key_held.pop(key, None)
            self._tokens = deque(entry for entry in self._tokens if keep(entry[1]))
            self._held -= dropped
            self._cond.notify_all()
            self._wake_room()
            return dropped
