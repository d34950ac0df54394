"""One thread that waits on every agent connection's file descriptors, instead of reader threads per host.

    hub = shared_hub()
    watch = hub.watch(fd, on_readable)   # on_readable() runs on the hub's thread when fd can be read
    watch.resume()                       # after on_readable returned False (paused: the consumer is full)
    watch.cancel()                       # before the fd is closed; waits for a callback in progress

Why: a fleet of 278 hosts had three threads per host (supervisor, RPC reader, stderr pump). The RPC
client and the local agent's pipes register their descriptors here instead: one `selectors` thread for
the whole fleet, whatever its size. The thread runs only while something is watched: it ends with the
last watch and the next watch starts it again.

`on_readable` must not block: it reads what is there (non-blocking) and returns True to be called again,
False to pause the watch until `resume()` (back-pressure: the consumer's queue is full, so the agent's
bytes stay in the pipe or the socket and flow control holds the agent, whose ring keeps the samples).
An exception in a callback cancels that watch (logged) and never stops the hub. `cancel()` and `resume()`
may be called from any thread, the callback's own included.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0  # the selector's longest wait: a safety net, changes wake it at once


class Watch:
    """One descriptor the hub waits on for one reader; see the module doc."""

    def __init__(self, hub: ReadHub, fd: int, on_readable: Callable[[], bool]) -> None:
        self.hub = hub
        self.fd = fd
        self.on_readable = on_readable
        self.lock = threading.RLock()  # held while the callback runs: cancel() waits for it
        self.armed = True
        self.cancelled = False
        self.resume_asked = False  # resume() came while the callback ran: it must not pause then

    def resume(self) -> None:
        self.hub._arm(self)

    def cancel(self) -> None:
        self.hub._cancel(self)


class ReadHub:
    def __init__(self, name: str = "meshdeck-read-hub") -> None:
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._watches: dict[int, Watch] = {}  # fd -> its armed or paused watch
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._name = name
        self._thread: threading.Thread | None = None  # runs while something is watched

    @property
    def thread(self) -> threading.Thread | None:
        """The hub's thread while it has something to watch; None when idle (it ends with the last watch)."""
        with self._lock:
            return self._thread

    def watch(self, fd: int, on_readable: Callable[[], bool]) -> Watch:
        """Call `on_readable()` on the hub's thread whenever `fd` has something to read (or its end)."""
        watch = Watch(self, fd, on_readable)
        with self._lock:
            if fd in self._watches:
                raise ValueError(f"file descriptor {fd} is already watched")
            # first: a descriptor closed meanwhile raises OSError here and leaves nothing behind (kept, its
            # number would be refused as "already watched" once the system reuses it)
            self._selector.register(fd, selectors.EVENT_READ, watch)
            self._watches[fd] = watch
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        self._wake()
        return watch

    def watching(self) -> int:
        with self._lock:
            return len(self._watches)

    def _arm(self, watch: Watch) -> None:
        with self._lock:
            if watch.cancelled or self._watches.get(watch.fd) is not watch:
                return
            if watch.armed:
                watch.resume_asked = True  # the callback may be deciding to pause right now
                return
            watch.armed = True
            self._selector.register(watch.fd, selectors.EVENT_READ, watch)
        self._wake()

    def _pause(self, watch: Watch) -> None:
        with self._lock:
            if watch.resume_asked:  # resumed after the callback decided to pause: stay armed
                watch.resume_asked = False
                return
            if watch.armed and not watch.cancelled and self._watches.get(watch.fd) is watch:
                watch.armed = False
                self._selector.unregister(watch.fd)

    def _cancel(self, watch: Watch) -> None:
        with self._lock:
            if watch.cancelled:
                return
            watch.cancelled = True
            if self._watches.get(watch.fd) is watch:
                del self._watches[watch.fd]
                if watch.armed:
                    self._selector.unregister(watch.fd)
            watch.armed = False
        self._wake()  # the last watch gone: the thread ends now, not at its next timeout
        if threading.current_thread() is not self._thread:
            with watch.lock:  # a callback running now finishes before the caller closes the fd
                pass

    def _wake(self) -> None:
        if threading.current_thread() is self._thread:
            return
        with contextlib.suppress(BlockingIOError):  # full: it is woken already
            os.write(self._wake_w, b"\0")

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._watches:  # nothing left to read: the thread ends (the next watch starts one)
                    self._thread = None
                    return
            ready = self._selector.select(IDLE_WAIT_S)
            for key, _events in ready:
                watch = key.data
                if watch is None:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    continue
                self._call(watch)

    def _call(self, watch: Watch) -> None:
        with watch.lock:
            with self._lock:
                if watch.cancelled or not watch.armed:
                    return
                watch.resume_asked = False
            try:
                keep = watch.on_readable()
            except Exception:
                log.exception("reader of file descriptor %d failed; it is no longer read", watch.fd)
                self._cancel(watch)
                return
        if not keep:
            self._pause(watch)


_shared: ReadHub | None = None
_shared_lock = threading.Lock()


def shared_hub() -> ReadHub:
    """The process's hub (made at the first call; its thread runs while it watches something)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ReadHub()
        return _shared
