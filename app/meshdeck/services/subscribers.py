"""Who is told of a service's events: the fleet's (host states, samples, worker events) and the deployment
registry's (deployment changes, log lines) are published the same way.

    subscribers = Subscribers[FleetEvent]("fleet")
    unsubscribe = subscribers.add(bridge.post)
    subscribers.publish(event)                 # on the publisher's thread, to each in the order they came

A subscriber must be quick and thread-safe (the console's bridge only queues). One that raises is logged
and never keeps the event from the others. Adding and removing replace the tuple whole, so publishing
reads it without a lock.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

Event = TypeVar("Event")


class Subscribers(Generic[Event]):
    def __init__(self, publisher: str) -> None:
        self._publisher = publisher  # named in the log when a subscriber fails
        self._callbacks: tuple[Callable[[Event], None], ...] = ()
        self._lock = threading.Lock()

    def add(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call `callback(event)` for every event from now on; returns the function that ends it."""
        with self._lock:
            self._callbacks = (*self._callbacks, callback)

        def remove() -> None:
            with self._lock:
                self._callbacks = tuple(c for c in self._callbacks if c is not callback)

        return remove

    def publish(self, event: Event) -> None:
        for callback in self._callbacks:
            try:
                callback(event)
            except Exception:
                log.exception("%s subscriber %r failed on %s", self._publisher, callback, type(event).__name__)
