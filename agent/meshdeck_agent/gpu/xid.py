"""XID events from NVML's event set, on one background thread.

XIDs are the driver's error reports (79 = GPU fell off the bus, 48 = double-bit ECC, 63/64 = row
remapping, 94/95 = contained/uncontained ECC, 13/31/43 = faults in an application). The watcher
registers nvmlEventTypeXidCriticalError on every GPU that supports it, waits on the set with a timeout
so it can stop, and hands each event to `on_event(gpu_index, {"xid", "ts"})`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from .nvml import Nvml, handle_key

log = logging.getLogger(__name__)


class XidWatcher:
    def __init__(self, nvml: Nvml, handles: List[Any], on_event: Callable[[int, Dict[str, Any]], None]) -> None:
        self.nvml = nvml
        self.handles = handles
        self.on_event = on_event
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._event_set: Any = None

    def start(self) -> bool:
        """Register and start waiting; False (and nothing started) when no GPU supports XID events."""
        if not self.handles or not self.nvml.available:
            return False
        event_type = self.nvml.constant("nvmlEventTypeXidCriticalError", 8)
        event_set = self.nvml.call("nvmlEventSetCreate")
        if event_set is None:
            return False
        registered = 0
        for handle in self.handles:
            if self.nvml.try_call("nvmlDeviceRegisterEvents", handle, event_type, event_set)[0]:
                registered += 1
        if not registered:
            self.nvml.call("nvmlEventSetFree", event_set)
            return False
        self._event_set = event_set
        self._thread = threading.Thread(target=self._run, name="xid-events", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        index_of = {handle_key(h): i for i, h in enumerate(self.handles)}
        module = self.nvml.module
        wait = getattr(module, "nvmlEventSetWait", None)
        timeout_error = getattr(module, "NVMLError_Timeout", None)
        while not self._stop.is_set() and wait is not None:
            try:
                data = wait(self._event_set, 500)
            except Exception as exc:
                if timeout_error is not None and isinstance(exc, timeout_error):
                    continue
                log.warning("XID event wait failed, stopping XID collection: %s", exc)
                return
            index = index_of.get(handle_key(getattr(data, "device", None)), -1)
            xid = getattr(data, "eventData", None)
            log.warning("XID %s on GPU %s", xid, index)
            self.on_event(index, {"xid": xid, "ts": time.time()})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._event_set is not None:
            self.nvml.call("nvmlEventSetFree", self._event_set)
            self._event_set = None
